"""The values where bugs live, drawn by default.

Each planted bug below is wrong only at one kind of hard value (an exact zero,
a large magnitude, the identity matrix, tied values): ``fuzzdiff.check`` at
its defaults finds it, and passes its correct twin.
"""

from __future__ import annotations

import pytest
import torch

import fuzzdiff
from fuzzdiff.api import hard_values
from fuzzdiff.case.structures import STRUCTURES


class SquareByDivision(torch.autograd.Function):
    """x**2, its backward 2 x**2 / x: nan at an exact zero, right elsewhere."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * (x * x) / x


class Square(SquareByDivision):
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * x


class SoftplusByExp(torch.autograd.Function):
    """softplus, its backward exp(x) / (1 + exp(x)): nan once exp overflows (x > 709.8 in float64)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.nn.functional.softplus(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.exp(x) / (1 + torch.exp(x))


class Softplus(SoftplusByExp):
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(x)


def _matrix_square_backward(a, grad):
    return grad @ a.mT + a.mT @ grad


class MatrixSquareIdentityShortcut(torch.autograd.Function):
    """A @ A, its backward taking a shortcut at the identity that forgets the factor 2."""

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return a @ a

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        eye = torch.eye(a.shape[-1], dtype=a.dtype)
        if a.numel() and torch.linalg.matrix_rank(a - eye) == 0:  # "the identity: nothing to multiply by"
            return grad
        return _matrix_square_backward(a, grad)


class MatrixSquare(MatrixSquareIdentityShortcut):
    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        return _matrix_square_backward(a, grad)


class SumOfSquaresTieShortcut(torch.autograd.Function):
    """sum(x**2) (smooth everywhere), its backward taking a branch where values tie that forgets the factor 2."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x * x).sum()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        if x.numel() > 1 and x.unique().numel() < x.numel():  # "tied values: share the gradient"
            return grad * x
        return 2 * grad * x


class SumOfSquares(SumOfSquaresTieShortcut):
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * grad * x


PLANTED = [
    pytest.param(SquareByDivision.apply, Square.apply, "x: n", {"zeros"}, id="zero-division"),
    pytest.param(SoftplusByExp.apply, Softplus.apply, "x: n", {"large", "overflow", "offset"}, id="overflowing-softplus"),
    pytest.param(
        MatrixSquareIdentityShortcut.apply, MatrixSquare.apply, "a: n n", {"identity"}, id="rule-at-the-identity"
    ),
    # values tie by themselves too (a grid, a scaling), so any structure may show it
    pytest.param(SumOfSquaresTieShortcut.apply, SumOfSquares.apply, "x: n", None, id="rule-at-ties"),
]


@pytest.mark.parametrize("bug, twin, spec, structure", PLANTED)
def test_a_bug_at_a_hard_value_is_found_at_defaults_and_its_twin_passes(bug, twin, spec, structure):
    report = fuzzdiff.check(bug, spec, checks=("grad",), seed=0, progress=False)
    assert not report.ok, report.summary()
    # (a tie of levels about 0 may be an exact zero too: a second root cause by its features)
    failure = report.failures[0]
    assert all(f.check == "grad" and "analytic" in f.message for f in report.failures), report.summary()
    if structure is not None:
        assert any(name in structure for a in failure.case.args for name, _ in a.values.structure), failure
    assert fuzzdiff.check(twin, spec, checks=("grad",), seed=0, progress=False).ok


# (values drawn on a grid tie by themselves now and then: the tie rule is found without the structure too)
@pytest.mark.parametrize("bug, twin, spec, structure", [p for p in PLANTED if p.id != "rule-at-ties"])
def test_without_hard_values_the_same_bugs_go_unseen(bug, twin, spec, structure):
    # the structures are what find them: structured=() opts out
    assert fuzzdiff.check(bug, spec, checks=("grad",), seed=0, structured=(), progress=False).ok


def test_the_hard_values_are_those_the_declared_domain_holds():
    assert hard_values({}) == STRUCTURES
    assert hard_values({"x": (None, None)}) == STRUCTURES
    assert hard_values({"x": (0.0, None)}) == ("ties", "all_equal")  # log: no zero, no scaling out of bounds
    # asin: no one on the diagonal
    assert hard_values({"x": (-1.0, 1.0)}) == ("zeros", "ties", "diagonal", "all_zero", "all_equal")
    assert hard_values({"x": (-1.0, 2.0)}) == ("zeros", "ties", "identity", "diagonal", "all_zero", "all_equal")


def sinc_scale(x):
    """``x sin|x| / |x|``, smooth everywhere, written with the where-trap: the
    untaken branch's 0/0 makes the gradient nan where every element is zero
    (a rotation's right Jacobian at the identity rotation), and only there."""
    n = x.norm(dim=-1, keepdim=True)
    return x * torch.where(n > 0, torch.sin(n) / n, torch.ones_like(n))


def sinc_scale_twin(x):
    n = x.norm(dim=-1, keepdim=True)
    safe = torch.where(n > 0, n, torch.ones_like(n))
    return x * torch.where(n > 0, torch.sin(safe) / safe, torch.ones_like(n))


@pytest.mark.parametrize("seed", [1, 4, 6])
def test_a_bug_only_where_every_element_is_zero_is_found_at_defaults(seed):
    # a single exact zero ("zeros") leaves the norm nonzero: only "all_zero" reaches the point
    report = fuzzdiff.check(sinc_scale, "x: 3", checks=("grad",), seed=seed, progress=False)
    assert not report.ok, report.summary()
    failure = report.failures[0]
    assert "analytic nan" in failure.message, report.summary()
    assert not failure.case.materialize().args[0].any(), failure.case
    assert fuzzdiff.check(sinc_scale_twin, "x: 3", checks=("grad",), seed=seed, progress=False).ok


class SquareWithJvpByDivision(torch.autograd.Function):
    """x**2 with a right backward, and a jvp 2 x**2 / x * t: nan at an exact zero."""

    @staticmethod
    def forward(x):
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        (ctx.x,) = inputs
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * x

    @staticmethod
    def jvp(ctx, t):
        return 2 * (ctx.x * ctx.x) / ctx.x * t


def test_a_forward_mode_rule_wrong_at_a_zero_is_found_by_the_forward_check():
    report = fuzzdiff.check(SquareWithJvpByDivision.apply, "x: n", checks=("forward",), seed=0, progress=False)
    assert not report.ok and report.failures[0].check == "forward", report.summary()
    assert fuzzdiff.check(SquareWithJvp.apply, "x: n", checks=("forward",), seed=0, progress=False).ok


class SquareWithJvp(SquareWithJvpByDivision):
    @staticmethod
    def jvp(ctx, t):
        return 2 * ctx.x * t


def cumprod_last(x):
    return torch.cumprod(x, -1)


def test_torchs_cumprod_at_an_exact_zero_is_found_through_a_user_wrapper():
    # reverse mode through cumprod's jvp divides by the input: nan at a zero (CUMPROD_JVP_AT_ZERO)
    # torch's recorded bug, met through the user's code: found, and reported as known (KNOWN line)
    report = fuzzdiff.check(cumprod_last, "x: n", checks=("forward2",), seed=0, progress=False)
    assert report.ok and report.known, report.summary()
    found = report.known[0]
    assert found.check == "forward2" and "analytic nan" in found.message, report.summary()
    assert any(name == "zeros" for a in found.case.args for name, _ in a.values.structure), found


def _normalized_product(x):
    """A product of two components of ``normalize(x)``, which divides by
    ``max(|x|, 1e-12)``: quadratic within 1e-12 of zero, its second
    derivative there about 1e24, and a step of 1e-6 sees none of it."""
    y = torch.nn.functional.normalize(x, dim=-1)
    return y[..., 0] * y[..., 1]


@pytest.mark.parametrize("check", ["gradgrad", "forward2"])
@pytest.mark.parametrize("grad", ["leaf", "view"])  # a view's leaf holds other values around it
def test_a_function_that_changes_below_the_step_at_zero_is_no_failure(check, grad):
    from fuzzdiff.record.format import case_from_json
    from fuzzdiff.search.runner import run_check
    from fuzzdiff.targets.target import Target

    probe = {"layout": "contiguous", "seed": 0, "zeros": 0.0}
    case = case_from_json({
        "target": "normalized_product", "dtype": "float64", "device": "cpu", "kwargs": {},
        "args": [{"shape": [3], "grad": grad, "layout": {"offset": 1, "storage_size": 2, "strides": [0]},
                  "values": {"seed": 0, "low": -2.0, "high": 2.0, "constant": [0], "structure": [["zeros", 0]]}}],
        "params": {"cotangent": probe, "direction": {**probe, "seed": 1}, "second": {**probe, "seed": 2}},
    })
    assert not case.materialize().args[0].any()  # the point is zero
    verdict = run_check(check, Target("normalized_product", _normalized_product, "x: n"), case)
    assert verdict.kind != "fail", verdict.message


def _rodrigues(r):
    """The rotation matrix of a rotation vector (Rodrigues' formula)."""
    theta = r.norm(dim=-1, keepdim=True)
    k = r / theta
    zero = torch.zeros_like(k[..., 0])
    skew = torch.stack(
        [zero, -k[..., 2], k[..., 1], k[..., 2], zero, -k[..., 0], -k[..., 1], k[..., 0], zero], -1
    ).unflatten(-1, (3, 3))
    s, c = theta.sin()[..., None], theta.cos()[..., None]
    return torch.eye(3, dtype=r.dtype) + s * skew + (1 - c) * skew @ skew


def test_float32_at_tied_large_values_is_judged_by_their_conditioning():
    """A rotation angle near 14000 loses its digits to float32 in any
    implementation; tied, shifted values once kept the conditioning nudge
    from moving them at all (snapped back to their levels), and that was
    reported as a failure."""
    from fuzzdiff.record.format import case_from_json
    from fuzzdiff.search.runner import run_check
    from fuzzdiff.targets.target import Target

    case = case_from_json({
        "target": "rodrigues", "dtype": "float32", "device": "cpu", "kwargs": {},
        "args": [{"shape": [3], "grad": "leaf", "values": {
            "seed": 0, "low": -2.0, "high": 2.0, "grid": 0.25, "structure": [["ties", 0], ["offset", 90]]}}],
        "params": {"cotangent": {"layout": "contiguous", "seed": 0, "zeros": 0.0}},
    })
    x = case.materialize().args[0]
    assert x.min() > 8000 and len(set(x.tolist())) < 3  # large and tied
    moved = case.nudged(2.0**-22, seed=5).materialize().args[0]
    assert not torch.equal(moved, x) and len(set(moved.tolist())) == len(set(x.tolist()))  # moved, still tied
    verdict = run_check("dtype", Target("rodrigues", _rodrigues, "r: 3"), case)
    assert verdict.kind != "fail", verdict.message
