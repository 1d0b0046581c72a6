"""Low precision: a derivative wrong only in float32 fails in every mode,
float32 rounding however amplified is inconclusive, and every tensor is
judged on its own scale.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.autograd import Function

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.confirm.low_precision import RoundingNoise
from fuzzdiff.search.runner import run_check
from fuzzdiff.targets.target import Target, Tol
from fuzzdiff.case.values import Values


def _probe(seed: int) -> dict:
    return {"seed": seed, "layout": "contiguous", "zeros": 0.0}


def _case(shape=(4,), dtype="float32", seed=1, low=-2.0, high=2.0, **params) -> Case:
    return Case("unit", (Arg(shape, Values(seed=seed, low=low, high=high)),), dtype,
                params={"cotangent": _probe(seed + 2), "direction": _probe(seed + 3),
                        "second": _probe(seed + 4), **params})


def _vmap_case(dtype="float32", seed=1, batch=3) -> Case:
    plan = {"composition": "vmap", "levels": [{"batch": batch, "in_dims": [0], "out_dims": [0]}],
            "batched_layouts": [None]}
    return _case(dtype=dtype, seed=seed, **plan)


class Sin(Function):
    @staticmethod
    def forward(x):
        return torch.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.cos(x)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * torch.cos(x)

    @staticmethod
    def vmap(info, in_dims, x):
        return torch.sin(x), in_dims[0]


class SinJvpOffInFloat32(Sin):
    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * torch.cos(x) * (1.05 if x.dtype == torch.float32 else 1.0)


class SinGraphlessInFloat32(Sin):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.cos(x.detach() if x.dtype == torch.float32 else x)


class SinRuleOffInFloat32(Sin):
    @staticmethod
    def vmap(info, in_dims, x):
        return torch.sin(x) * (1.001 if x.dtype == torch.float32 else 1.0), in_dims[0]


SIN = Target("unit_sin", Sin.apply, "x: n")


@pytest.mark.parametrize("check,function", [("forward", SinJvpOffInFloat32),
                                            ("gradgrad", SinGraphlessInFloat32),
                                            ("vmap", SinRuleOffInFloat32)])
def test_a_derivative_wrong_only_in_float32_fails(check, function):
    """float64 agrees on the same values, so the float32 computation is judged
    against it: 5%, a missing second-order term and 0.1% are far beyond what
    rounding explains for sin."""
    target = Target("unit_wrong_in_float32", function.apply, "x: n")
    make = _vmap_case if check == "vmap" else _case
    verdict = run_check(check, target, make())
    assert verdict.kind == "fail", verdict
    assert "float64 agrees" in verdict.message
    assert "float32 vs float64 on the same values" in verdict.message
    assert run_check(check, target, make(dtype="float64")).kind == "pass"
    assert run_check(check, SIN, make()).kind == "pass"


def test_a_declared_looser_tolerance_is_kept_in_float32():
    """The float32 judgement uses the check's tolerance for the target: a target
    that declares its forward mode good to 10% is not failed for 5%."""
    target = Target("unit_loose", SinJvpOffInFloat32.apply, "x: n",
                    tolerances={"forward": Tol(1e-5, 0.1, "an approximate jvp, by design")})
    assert run_check("forward", target, _case()).kind in ("pass", "inconclusive")


def _saturated_tanh_layer_norm(x):
    return F.layer_norm(torch.tanh(x), x.shape[-1:])


TANH_LN = Target("unit_tanh_layer_norm", _saturated_tanh_layer_norm, "x: n")


def _saturated(seed: int, check: str) -> Case:
    case = _case(shape=(5,), seed=seed, low=5.0, high=8.0)
    return Case("unit", case.args, "float32", params={**case.params, **_vmap_case().params}) \
        if check == "vmap" else case


@pytest.mark.parametrize("check", ["grad", "forward", "gradgrad", "vmap"])
def test_rounding_amplified_by_intermediates_is_inconclusive(check):
    """tanh(x) rounds to float32 near 1 and the normalization magnifies its
    last bits: float32 and float64 differ by far more than the tolerance, but
    moving the inputs by float32 rounding barely moves the float64 result.
    Rounding the intermediate results (RoundingNoise) does: not a failure."""
    kinds = [run_check(check, TANH_LN, _saturated(s, check)).kind for s in range(12)]
    assert "fail" not in kinds, kinds
    if check != "vmap":  # vmap and its loop round alike: they agree
        assert "inconclusive" in kinds, kinds


def test_an_unstable_formula_of_torchs_own_is_the_dtype_checks_finding():
    """The same composition as torch's own target, to the dtype check: float32
    loses digits that the problem's conditioning does not (an unstable
    formula), which is its question."""
    kinds = [run_check("dtype", TANH_LN, _saturated(s, "dtype")).kind for s in range(12)]
    assert "fail" in kinds, kinds


def test_digits_a_users_composition_of_torch_ops_loses_are_the_dtypes_noise():
    """The same composition in a user's code: every digit float32 loses goes
    to the rounding of torch's ops, and no rule of the user's computes them:
    the dtype's noise, said with its size, never a finding (a newcomer's
    trial: performer's causal attention, whose normalizer lies within 1e-4 of
    its numerator)."""
    target = replace(TANH_LN, family="user")
    verdicts = [run_check("dtype", target, _saturated(s, "dtype")) for s in range(12)]
    assert "fail" not in [v.kind for v in verdicts], verdicts
    assert any("digits to its own rounding" in v.message for v in verdicts if v.kind == "inconclusive"), verdicts


def test_digits_a_moduleinfo_modules_composition_loses_are_the_dtypes_noise():
    """A ModuleInfo module's forward is a composition of ops OpInfo tests one
    by one: as in a user's code, digits lost to their rounding are the inputs'
    conditioning (a saturated nn.MultiheadAttention lost six of float32's in a
    campaign), never a finding of the module."""
    target = replace(TANH_LN, family="moduleinfo")
    assert target.torchs_own
    verdicts = [run_check("dtype", target, _saturated(s, "dtype")) for s in range(12)]
    assert "fail" not in [v.kind for v in verdicts], verdicts
    assert any("digits to its own rounding" in v.message for v in verdicts if v.kind == "inconclusive"), verdicts


class Square(Function):
    @staticmethod
    def forward(x):
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


class PolarizedSquare(Square):
    """x**2, its derivative 2x taken as a difference of squares of x +- 1e6:
    float32 keeps none of 2x's digits in (x + c)**2."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        c = 1e6
        return g * ((x + c) ** 2 - (x - c) ** 2) / (2 * c)


def test_a_rule_whose_own_formula_loses_digits_is_the_dtype_checks_finding():
    """Rounding explains the float32 gradient only with the rule's own
    intermediates rounded: computed exactly, with everything else rounded,
    it is not explained. The rule's formula loses the digits, and the
    verdict names it."""
    target = Target("unit_polarized_square", PolarizedSquare.apply, "x: n", family="user")
    verdicts = [run_check("dtype", target, _case(shape=(4,), seed=s)) for s in range(4)]
    failed = [v for v in verdicts if v.kind == "fail"]
    assert failed and all("PolarizedSquare's backward" in v.message for v in failed), verdicts


def test_a_stable_rule_in_a_composition_that_loses_digits_is_not_blamed():
    """A stable rule inside the saturated tanh before a normalization: rounding
    outside the rule explains the difference, so it is the dtype's noise."""
    target = Target("unit_square_tanh_ln", lambda x: _saturated_tanh_layer_norm(Square.apply(x)), "x: n", family="user")
    verdicts = [run_check("dtype", target, _case(shape=(5,), seed=s, low=2.3, high=2.9)) for s in range(12)]
    assert "fail" not in [v.kind for v in verdicts], verdicts
    assert any("outside Square's backward" in v.message for v in verdicts if v.kind == "inconclusive"), verdicts


_SPLINE_LOGITS = torch.tensor([57.0, -146.0, -155.0, 35.0], dtype=torch.float64)
_SPLINE_MIX = torch.tensor([[1000.0, -3.0], [2.0, 5.0], [-1.0, 4.0], [-1000.0, 7.0]], dtype=torch.float64)


def _softmax_bins(x):
    """A spline's bin widths, softmax of logits far apart, mixed by large
    weights, beside a small term of their own: the softmax backward's
    s_i (g_i - <s, g>) cancels terms of 1000 into an entry of 1e-6."""
    return torch.softmax(x + _SPLINE_LOGITS.to(x.dtype), -1) @ _SPLINE_MIX.to(x.dtype) + 1e-3 * x[..., 1:2]


def test_a_value_rounding_leaves_without_a_digit_is_not_the_dtype_checks_finding():
    """nflows' rational-quadratic spline in float32 (a newcomer's trial): one
    gradient entry below the ulp of the sum it cancels out of, while the rest
    of its tensor keeps every digit. No float32 formula holds that entry; the
    dtype check confirmed it "by a repeat and a conditioning estimate"."""
    target = Target("unit_softmax_bins", _softmax_bins, "x: n 4")
    kinds = [run_check("dtype", target, Case("unit_softmax_bins", (Arg((3, 4), Values(seed=s, low=-2.0, high=2.0)),),
                                             "float32")).kind for s in range(12)]
    assert "fail" not in kinds, kinds
    assert "inconclusive" in kinds, kinds


def test_a_gradient_zero_by_cancellation_is_not_judged_on_its_own_zero():
    """Normalizing groups of one value: the gradient is zero, computed as a
    difference of terms of size |v| / |x|. Its float32 rounding is all that is
    left, and rounding the intermediates shows it."""
    target = Target("unit_normalize_one", lambda x: F.normalize(x, dim=1), "x: n m")
    kinds = [run_check("dtype", target, _case(shape=(3, 1), seed=s, low=-0.005, high=0.005)).kind
             for s in range(12)]
    assert "fail" not in kinds, kinds
    assert "inconclusive" in kinds, kinds


def _small_in_bfloat16(x):
    small = torch.sin(x.bfloat16() if x.dtype == torch.float32 else x).to(x.dtype)
    return x * 1e4, 0.1 * small


def test_a_small_output_is_judged_on_its_own_scale():
    """Output 1 is computed in bfloat16 in float32: off by ~1e-4, far beyond
    its own tolerance, far below that of output 0 (~1e4)."""
    target = Target("unit_big_and_small", _small_in_bfloat16, "x: n")
    verdict = run_check("dtype", target, _case(shape=(8,)))
    assert verdict.kind == "fail" and "output 1" in verdict.message, verdict


class BigAndSmall(Function):
    @staticmethod
    def forward(x):
        return x * 1e4, torch.sin(x) * 0.1

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g, h):
        (x,) = ctx.saved_tensors
        return g * 1e4 + h * 0.1 * torch.cos(x)

    @staticmethod
    def vmap(info, in_dims, x):
        return (x * 1e4, torch.sin(x) * (0.1 + 1e-5)), (in_dims[0], in_dims[0])


def test_a_small_vmapped_output_is_judged_on_its_own_scale():
    """A batching rule 1e-4 off in the small output, in float64: beyond its
    tolerance (1e-10 + 1e-7 * 0.1), within that of the large one."""
    target = Target("unit_big_and_small_rule", BigAndSmall.apply, "x: n")
    verdict = run_check("vmap", target, _vmap_case(dtype="float64"))
    assert verdict.kind == "fail" and "output 1" in verdict.message, verdict


# -- RoundingNoise ----------------------------------------------------------------------

def test_rounding_noise_moves_fresh_results_by_the_unit_and_nothing_else():
    x = torch.linspace(1.0, 2.0, 6, dtype=torch.float64)
    with RoundingNoise(unit=2.0**-24, seed=3):
        y = x * 1.0
        view = x.view(2, 3)
        count = torch.arange(4, dtype=torch.float64)
        buffer = x.clone()
        inplace = buffer.mul_(1.0)
        z = x * 1.0
    assert torch.equal((y / x - 1).abs(), torch.full_like(x, 2.0**-24))
    assert not torch.equal(y, z)  # fresh noise for every result
    assert view.data_ptr() == x.data_ptr() and torch.equal(view.reshape(-1), x)
    assert torch.equal(count, torch.arange(4, dtype=torch.float64))  # a constant, not a rounded value
    # the clone is rounded, and mul_'s result again, where it lies
    assert inplace.data_ptr() == buffer.data_ptr() and (inplace / x - 1).abs().max() > 1.5 * 2.0**-24
    with RoundingNoise(unit=2.0**-24, seed=3):
        again = x * 1.0
    assert torch.equal(again, y)  # seeded: a replay rounds the same way
    with RoundingNoise():
        i = torch.tensor([1, 2]) * 3
    assert torch.equal(i, torch.tensor([3, 6]))  # integers are exact


def test_rounding_noise_rounds_a_result_computed_in_place():
    """A saturated gate computed in place (an RNN cell's ``sigmoid_``) is one
    that float32 holds as exactly 1, so its derivative y (1 - y) loses every
    digit in float32: rounding explains that only if in-place results are
    rounded too (nn.LSTM's float32 gradients were failures of the dtype check)."""
    x = torch.tensor([20.0], dtype=torch.float64, requires_grad=True)
    (exact,) = torch.autograd.grad(x.clone().sigmoid_(), x)
    with RoundingNoise(seed=0):
        (noisy,) = torch.autograd.grad(x.clone().sigmoid_(), x)
    assert (noisy - exact).abs() > exact.abs()  # no significant digit left: 2e-9 against y's rounding of 6e-8


def test_rounding_noise_reaches_backward_forward_mode_and_vmap():
    x = torch.tensor([0.3, 0.7], dtype=torch.float64, requires_grad=True)
    (exact,) = torch.autograd.grad(torch.sin(x).sum(), x)
    with RoundingNoise(seed=1):
        (noisy,) = torch.autograd.grad(torch.sin(x).sum(), x)
        _, tangent = torch.func.jvp(torch.sin, (x.detach(),), (torch.ones(2, dtype=torch.float64),))
        batched = torch.func.vmap(torch.sin)(x.detach().expand(3, 2))
    for t in (noisy, tangent):
        assert not torch.equal(t, exact) and torch.allclose(t, exact, rtol=1e-6, atol=0)
    assert not torch.equal(batched, torch.sin(x.detach()).expand(3, 2))


@pytest.mark.parametrize("pinned", [False, True])
def test_a_float32_rounding_nudge_moves_values_a_large_structure_scaled_past_the_span(pinned):
    """The conditioning estimate and the neighbours move every input by
    float32 rounding; of a value scaled to about 112 a step that is a part of
    the span [-2, 2] rounded back to the value itself, so a rank-1 point a
    stride-0 layout made (where special_procrustes has no derivative) was
    "confirmed" at neighbours that were the point itself."""
    from fuzzdiff.case.layout import Layout
    from fuzzdiff.confirm.low_precision import F32_NUDGE

    values = Values(seed=3, low=-2.0, high=2.0, constant=(0,), structure=(("large", 1),))
    case = Case("m", (Arg((3, 3), values, layout=Layout(4, (0, 1), 1)),), dtype="float32")
    if pinned:  # a record's values
        case = replace(case, data=case.storages())
    x = case.materialize(requires_grad=False).args[0]
    assert x.abs().max() > 16  # the structure took the values past the span
    near = case.spread().nudged(F32_NUDGE, seed=5, keep_structure=False).materialize(requires_grad=False).args[0]
    big = x.abs() > 16  # a step of a part of the span is below half their float32 spacing
    assert big.sum() >= 3 and (near != x)[big].float().mean() >= 0.5  # most of them moved
    assert not torch.equal(near[0], near[1])  # each repeated row on its own
    assert ((near - x).abs() <= 4 * F32_NUDGE * x.abs()).all()  # by float32 rounding, no more
    inside = Values(seed=3, low=-2.0, high=2.0)  # values within the span move as they did
    assert inside._step(4, 0.01, 7, at=np.array([0.5, -1.0, 1.5, 2.0])).tolist() == inside._step(4, 0.01, 7).tolist()


def _batch_norm_train(x, w, b):
    return F.batch_norm(x, None, None, w, b, training=True)


def test_a_stride0_inputs_gradient_summed_from_cancelling_elements_is_not_a_finding():
    """Batch norm in training mode at a batch of one repeated value (the
    bias a view of the same storage): each element's gradient is about
    1/sqrt(eps) = 316 times the cotangent, and the leaf under the stride-0
    view sums them to an exact zero; float32 leaves its rounding of that sum
    (1e-3 beside the bias's gradient of 1.9). The cancellation is the
    layout's, not batch norm's formula: rounding the intermediates explains
    it, so it is not the dtype check's finding."""
    from fuzzdiff.case.case import Alias
    from fuzzdiff.case.layout import Layout

    target = Target("unit_batch_norm_train", _batch_norm_train, "x: n c, w: c, b: c")
    values = Values(seed=2302143302, low=-7.024765315725971, high=8.460954032517956)
    x = Arg((4, 10), replace(values, constant=(0, 1)), Layout(10, (0, 0), 0), grad="view")
    w = Arg((10,), Values(seed=1370643261, low=0.5, high=1.5, constant=(0,)), Layout(1, (0,), 0))
    b = Arg((10,), replace(values, constant=(0,)), Layout(10, (1,), 0), alias=Alias(0, "view"), grad="view")
    case = Case(target.name, (x, w, b), "float32",
                params={"cotangent": {"layout": "expanded", "seed": 931178747, "zeros": 0.5}})
    verdict = run_check("dtype", target, case)
    assert verdict.kind == "inconclusive" and "rounding of intermediate results" in verdict.message, verdict


def _cayley(x):
    """geotorch's Cayley map: orthogonal, and well-conditioned in x, but near
    x = c + small its solve's matrix has a condition number near c."""
    s = x.triu(1) - x.triu(1).mT
    eye = torch.eye(x.shape[-1], dtype=x.dtype)
    return torch.linalg.solve(eye - s, eye + s)


def _solve_off_in_float32(x):
    s = x.triu(1) - x.triu(1).mT
    eye = torch.eye(x.shape[-1], dtype=x.dtype)
    return torch.linalg.solve(eye - s, eye + s) * (1.002 if x.dtype == torch.float32 else 1.0)


def test_digits_a_solve_loses_to_its_own_conditioning_are_not_the_dtype_checks_finding():
    """At x = 65536 + small, float32's solve is off by 1e-3 of Q's entries:
    cond(I - S) times float32's rounding, which moving x by rounding does not
    show (Q barely moves) and which no float32 solve escapes. Judged a
    finding, it was a false alarm on geotorch's orthogonal parametrization."""
    cayley = Target("unit_cayley", _cayley, "x: n n")
    cases = [_case(shape=(3, 3), seed=s, low=65535.0, high=65537.0) for s in range(6)]
    verdicts = [run_check("dtype", cayley, c) for c in cases]
    assert "fail" not in [v.kind for v in verdicts], verdicts
    explained = [v for v in verdicts if v.kind == "inconclusive"]
    assert explained and all("aten::_linalg_solve_ex" in v.message for v in explained), explained
    wrong = Target("unit_solve_off_in_float32", _solve_off_in_float32, "x: n n")
    well = [_case(shape=(3, 3), seed=s, low=-0.3, high=0.3) for s in range(3)]
    assert [run_check("dtype", wrong, c).kind for c in well] == ["fail"] * 3


def test_rounding_at_conditioned_ops_moves_only_their_inputs():
    from fuzzdiff.confirm.rounding import ConditionedOpNoise

    a = torch.tensor([[2.0, 1.0], [1.0, 3.0]], dtype=torch.float64)
    b = torch.tensor([1.0, -1.0], dtype=torch.float64)
    with ConditionedOpNoise() as mode:
        plain = torch.tanh(a)
        moved = torch.linalg.solve(a, b)
    assert torch.equal(plain, torch.tanh(a)) and mode.met == {"aten::_linalg_solve_ex"}
    off = (moved - torch.linalg.solve(a, b)).abs().max().item()
    assert 0 < off < 10 * torch.finfo(torch.float32).eps
