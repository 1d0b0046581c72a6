"""The checks never cry wolf: kinks are inconclusive, missing formulas unsupported.

And they still bite: a wrong backward is a confirmed failure.
"""

import torch
from hypothesis import settings
from torch.autograd.function import once_differentiable

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.search.fuzzing import FuzzFailure, fuzz
from fuzzdiff.search.runner import run_check
from fuzzdiff.targets import Target
from fuzzdiff.case.values import Values
from fuzzdiff.config import FuzzConfig

FEW = settings(max_examples=25, derandomize=True, database=None, deadline=None)


def relu_at(value: float) -> Case:
    return Case("relu", (Arg((3,), Values(seed=1, low=value, high=value)),),
                params={"cotangent": {"seed": 1}, "direction": {"seed": 2}})


RELU = Target("relu", torch.relu, "x: n")  # deliberately without its kink declared


def test_a_kink_is_inconclusive_not_a_failure():
    # At exactly 0 autograd says 0 and central differences say u/2: the
    # discrepancy vanishes at neighbouring points, so it must not be a failure.
    verdict = run_check("grad", RELU, relu_at(0.0))
    assert verdict.kind == "inconclusive", verdict
    assert "neighbouring" in verdict.message


def test_the_same_op_away_from_the_kink_passes():
    assert run_check("grad", RELU, relu_at(0.5)).kind == "pass"


class NoJvp(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return g * 2


class OnceDifferentiable(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.cos()


def test_missing_forward_formula_is_unsupported():
    target = Target("nojvp", NoJvp.apply, "x: n")
    tally = fuzz("forward", target, FuzzConfig(variants=4, structures=1), settings=FEW)
    assert tally.only_unsupported, tally.counts
    assert "jvp" in tally.reasons["unsupported"]


def test_missing_double_backward_is_unsupported():
    target = Target("once", OnceDifferentiable.apply, "x: n")
    tally = fuzz("gradgrad", target, FuzzConfig(variants=4, structures=1), settings=FEW)
    assert tally.counts["fail"] == 0
    assert tally.counts["unsupported"] > 0, tally.counts


class WrongBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.cos() * 1.001  # 0.1% off: far outside float64 tolerance


def test_a_wrong_backward_is_a_confirmed_failure():
    target = Target("wrong", WrongBackward.apply, "x: n")
    try:
        fuzz("grad", target, FuzzConfig(variants=4, structures=1), settings=FEW)
    except FuzzFailure as failure:
        assert failure.verdict.kind == "fail"
        assert "confirmed" in failure.verdict.message
    else:
        raise AssertionError("a 0.1% error in backward went unnoticed")


class DetachedDoubleBackward(torch.autograd.Function):
    """x * exp(x) with a backward whose exp(x) is detached: first order right,
    second order wrong; no jvp, as most custom Functions."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x.exp()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (1 + x) * x.detach().exp()


def test_second_order_bug_found_without_forward_mode():
    # forward-over-reverse is unsupported here; reverse-over-reverse must still judge.
    target = Target("xexp", DetachedDoubleBackward.apply, "x: n")
    assert fuzz("grad", target, FuzzConfig(variants=4, structures=1), settings=FEW).counts["fail"] == 0
    try:
        fuzz("gradgrad", target, FuzzConfig(variants=4, structures=1), settings=FEW)
    except FuzzFailure as failure:
        assert "reverse-over-reverse" in failure.verdict.message
    else:
        raise AssertionError("a detached factor in backward went unnoticed by gradgrad")


class _Square(torch.autograd.Function):
    """x * x; subclasses write the backward."""

    @staticmethod
    def forward(x):
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])


class _SquareByCancellation(_Square):
    """Correct in float64 to ~1e-10, but its backward rounds at the scale of
    1e12: finite differences of that backward are noise, not a derivative."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (((x + 1e6) ** 2 - (x - 1e6) ** 2) / 2e6)


def test_a_noisy_finite_difference_reference_is_not_a_failure():
    # Found by the zoo (square_polarization, gradgrad, float64, seed 7): every
    # eps gave a reference off by ~1e-5, and the failure was "confirmed".
    probe = {"seed": 4137821041, "layout": "contiguous", "zeros": 0.0}
    case = Case("unit_square_by_cancellation", (Arg((), Values(seed=3410172223), grad="view"),),
                params={"cotangent": probe, "direction": probe, "second": probe})
    t = Target("unit_square_by_cancellation", _SquareByCancellation.apply, "x: ...")
    verdict = run_check("gradgrad", t, case)
    assert verdict.kind in ("pass", "inconclusive"), verdict
    # a real second-order bug at the same point is still confirmed
    wrong = Target("unit_square_wrong", lambda x: _WrongSecondOrder.apply(x), "x: ...")
    assert run_check("gradgrad", wrong, case).kind == "fail"


class _WrongSecondOrder(_Square):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 2 * x.detach() * (1 + 0 * x)  # detached: double backward misses 2g


# -- a function that is not finite at the point has no derivative there to check ---------

def _corrcoef_rows(x):
    return torch.corrcoef(x)


def _constant(value: float) -> Case:
    return Case("corrcoef_rows", (Arg((2, 3), Values(seed=1, low=value, high=value)),),
                params={"cotangent": {"seed": 1}, "direction": {"seed": 2}})


class NanBackward(torch.autograd.Function):
    """exp with a nan gradient where the function is perfectly finite."""

    @staticmethod
    def forward(x):
        return x.exp()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y * torch.nan


def test_nan_where_the_function_itself_is_nan_is_inconclusive():
    # Constant rows: corrcoef is 0/0 = nan here, finite an eps away (the finite
    # differences see 0), so autograd's nan is no wrong derivative.
    verdict = run_check("grad", Target("corrcoef_rows", _corrcoef_rows, "x: 2 3"), _constant(0.75))
    assert verdict.kind == "inconclusive", verdict
    assert "not finite at this input" in verdict.message


def test_a_nan_second_derivative_where_the_function_itself_is_nan_is_inconclusive():
    # x / x at 0 (torch.addcdiv(a, t, t) with t = 0): nan there, 1 an eps away,
    # so the finite differences of the first derivative see 0 and the second-order
    # identities nan, at every neighbouring point of an all-zero input too.
    case = Case("self_ratio", (Arg((3,), Values(seed=1, low=0.0, high=0.0)),),
                params={"cotangent": {"seed": 1}, "direction": {"seed": 2}, "second": {"seed": 3}})
    verdict = run_check("gradgrad", Target("self_ratio", lambda x: x / x, "x: n"), case)
    assert verdict.kind == "inconclusive", verdict
    assert "not finite at this input" in verdict.message


def test_a_nan_gradient_of_a_finite_function_is_still_a_failure():
    target = Target("nan_backward", NanBackward.apply, "x: n")
    case = Case("nan_backward", (Arg((3,), Values(seed=1)),), params={"cotangent": {"seed": 1}, "direction": {"seed": 2}})
    verdict = run_check("grad", target, case)
    assert verdict.kind == "fail", verdict
