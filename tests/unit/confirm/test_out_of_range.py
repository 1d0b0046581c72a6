"""Outside a dtype's range is not a bug: where float64's value of an output
or a derivative is beyond float32's largest, float32 can only overflow, and
a derivative met by that infinity is inf * 0. Both are out of range
("inconclusive"), in the dtype check and in every identity judged in
float32; a derivative wrong within the range still fails.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import Function

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.checks.forward import vs_numeric
from fuzzdiff.confirm.identities import EPS
from fuzzdiff.confirm.low_precision import RoundingNoise
from fuzzdiff.search.runner import run_check
from fuzzdiff.targets.target import Target
from fuzzdiff.case.values import Values


def _probe(seed: int, zeros: float = 0.0) -> dict:
    return {"seed": seed, "layout": "contiguous", "zeros": zeros}


# Probe seed 0 draws 1.9156 for a one-element tensor, seed 4 draws 0.5739.
LARGE, SMALL = _probe(0), _probe(4)


def _case(structure, cotangent=LARGE, direction=LARGE, second=SMALL, shape=(1,)) -> Case:
    return Case("unit", (Arg(shape, Values(seed=1, structure=structure)),), "float32",
                params={"cotangent": cotangent, "direction": direction, "second": second})


# x + 256: exp(x) is about 1e111, beyond float32's 3.4e38
OFFSET = (("offset", 0),)
# x = 88.72: exp(x) is 3.39e38, within float32's range; twice it is not
EDGE = (("overflow", 0),)
# x = 99.8: exp(x) overflows float32, softplus(x) and its derivative do not
PAST_EDGE = (("overflow", 4),)


class Exp(Function):
    """exp, correct, with its own backward and jvp (both through the saved output)."""

    @staticmethod
    def forward(x):
        return torch.exp(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y

    @staticmethod
    def jvp(ctx, t):
        (y,) = ctx.saved_tensors
        return t * y


EXP_FAMILY = {"exp": torch.exp, "expm1": torch.expm1, "sinh": torch.sinh, "cosh": torch.cosh,
              "exp2": torch.exp2, "custom_exp": Exp.apply}


@pytest.mark.parametrize("name", list(EXP_FAMILY))
def test_the_exp_family_overflowing_float32_is_out_of_range_not_wrong(name):
    """float32 gives inf where float64 gives 1e111 (or 1e77 for exp2): the
    dtype check says which value float32 cannot hold, instead of failing it."""
    target = Target(f"unit_{name}", EXP_FAMILY[name], "x: n")
    verdict = run_check("dtype", target, _case(OFFSET))
    assert verdict.kind == "inconclusive", verdict
    assert "out of range for float32: output 0 at [0]: float64 value" in verdict.message
    assert "is outside float32's finite range" in verdict.message


@pytest.mark.parametrize("name", list(EXP_FAMILY))
def test_a_tangent_at_an_overflowed_output_is_inf_times_zero(name):
    """Along a direction that is zero, forward mode's tangent at an infinite
    output is inf * 0 = nan, where the finite differences in float64 say 0."""
    target = Target(f"unit_{name}", EXP_FAMILY[name], "x: n")
    case = _case(OFFSET, direction=_probe(0, zeros=1.0))
    m = vs_numeric(target, case, EPS)
    assert m.reference == 0.0 and math.isnan(m.analytic) and not m.defined
    verdict = run_check("forward", target, case)  # <J^T v, u> is inf * 0 too: "the reference is not finite"
    assert verdict.kind == "inconclusive", verdict


@pytest.mark.parametrize("check", ["dtype", "forward", "gradgrad", "forward2"])
def test_a_derivative_beyond_float32s_range_is_out_of_range_in_every_mode(check):
    """exp(88.72) = 3.39e38 fits float32; its derivatives 1.92 times that do
    not. The dtype check's gradient along v = 1.92 overflows; with v = 0, J u
    overflows inside forward mode and the second derivatives, and v = 0
    times it is nan where float64 says 0."""
    target = Target("unit_exp", torch.exp, "x: n")
    v = LARGE if check == "dtype" else _probe(0, zeros=1.0)
    verdict = run_check(check, target, _case(EDGE, cotangent=v))
    assert verdict.kind == "inconclusive", verdict
    assert "out of range for float32" in verdict.message
    assert "float64 value 6.5e+38 is outside float32's finite range" in verdict.message


def test_a_second_derivative_beyond_float64s_range_is_out_of_range():
    """sinh(709.78) = 8.9e307 fits float64, and so does its derivative along
    u (1.7e308); d2f[u, u'] = 3.29e308 does not. The identities meet w = 0
    times that inf: nan, where the finite differences of <J^T w, u> say 0."""
    target = Target("unit_sinh", torch.sinh, "x: n")
    case = replace(_case(EDGE, cotangent=_probe(0, zeros=1.0), second=LARGE), dtype="float64")
    verdict = run_check("forward2", target, case)
    assert verdict.kind == "inconclusive", verdict
    assert "out of range for float64: d2f[u, w] (output 0) at [0]: float64 value 3.29e+308" in verdict.message


class ExpSquare(Function):
    """exp(x^2), with the backward one writes first: g * (2 x exp(x^2))."""

    @staticmethod
    def forward(x):
        return torch.exp(x * x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (2 * x * torch.exp(x * x))


class SoftplusNaiveSigmoid(Function):
    """softplus, stable; its backward exp(x) / (1 + exp(x)) is inf / inf for
    large x, where the derivative is 1 (the self-test zoo's bug)."""

    @staticmethod
    def forward(x):
        return F.softplus(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        e = torch.exp(x)
        return g * (e / (1 + e))

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        e = torch.exp(x)
        return t * (e / (1 + e))


def _at(case: Case, *values: float) -> Case:
    return replace(case, data={0: torch.tensor(values, dtype=torch.float32)})


def test_inf_times_zero_is_excused_only_where_the_point_leaves_the_range():
    """With v = 0 both gradients are 0 * inf = nan in float32 and 0 in float64.
    At x = 9.4 exp(x^2) = 2.4e38 fits float32 and its derivative 4.5e39 does
    not: out of range. softplus(100) and its derivative 1 fit: its backward
    overflows in an intermediate of its own, and that is a finding."""
    zero_v = _case((), cotangent=_probe(0, zeros=1.0))
    verdict = run_check("dtype", Target("unit_exp_square", ExpSquare.apply, "x: n"), _at(zero_v, 9.4))
    assert verdict.kind == "inconclusive", verdict
    assert "grad 0 at [0] is nan where" in verdict.message and "out of range for float32" in verdict.message
    verdict = run_check("dtype", Target("unit_softplus_naive", SoftplusNaiveSigmoid.apply, "x: n"), _at(zero_v, 100))
    assert verdict.kind == "fail", verdict


@pytest.mark.parametrize("check", ["grad", "forward", "dtype"])
@pytest.mark.parametrize("structure", [OFFSET, PAST_EDGE], ids=["offset", "overflow"])
def test_a_backward_that_overflows_within_range_still_fails(check, structure):
    """softplus(x) is about x and its derivative about 1 at x = 256 or 99.8:
    every value the point has fits float32, so the nan of exp(x) / (1 + exp(x))
    is wrong, in reverse mode, forward mode and the dtype check alike."""
    target = Target("unit_softplus_naive", SoftplusNaiveSigmoid.apply, "x: n")
    verdict = run_check(check, target, _case(structure, cotangent=SMALL, direction=SMALL))
    assert verdict.kind == "fail", verdict


def test_a_backward_that_underflows_within_range_still_fails():
    """A softmax written exp(x) / sum(exp(x)) at x near -100: every exp is a
    float32 subnormal and autograd's quotient rule divides by their sum
    squared, which is 0 in float32. The derivative (about 0.1) fits: the nan
    is the formula's, as softplus's overflow is."""
    target = Target("unit_naive_softmax", lambda x: torch.exp(x) / torch.exp(x).sum(), "x: n")
    case = Case("unit", (Arg((4,), Values(seed=0, low=-103.0, high=-99.0)),), "float32",
                params={"cotangent": _probe(10), "direction": _probe(20)})
    for check in ("grad", "dtype"):
        verdict = run_check(check, target, case)
        assert verdict.kind == "fail", verdict


class ExpOffInFloat32(Exp):
    """exp, 1% off in float32 for x below 50: a bug beside values that overflow."""

    @staticmethod
    def forward(x):
        y = torch.exp(x)
        return torch.where(x < 50, y * 1.01, y) if x.dtype == torch.float32 else y


def test_a_wrong_value_beside_an_overflowed_one_still_fails():
    """Element 0 overflows in float32 and is not judged; element 1 is 1% off
    within range: only the value float32 cannot hold is excused, and the
    tensor's scale is what is left (1e111 would swallow a 1% error)."""
    target = Target("unit_exp_off", ExpOffInFloat32.apply, "x: n")
    verdict = run_check("dtype", target, _at(_case((), shape=(2,)), 256.0, 1.0))
    assert verdict.kind == "fail", verdict
    assert "output 0 at [1]" in verdict.message


def test_rounding_noise_rounds_below_the_smallest_normal_as_the_dtype_does():
    """float32 rounds relatively down to its smallest normal value, and below
    it absolutely: by half its smallest subnormal, 2**-150. Zeros stay."""
    tiny = torch.finfo(torch.float32).tiny
    x = torch.tensor([3 * tiny, tiny / 4, 1e-44, 1e-60, 0.0, 1.0], dtype=torch.float64)
    with RoundingNoise(seed=3):
        y = x * 1.0
    moved = (y - x).abs()
    assert torch.allclose(moved[[0, 5]], x[[0, 5]] * 2.0**-24, rtol=1e-6, atol=0)
    assert torch.equal(moved[1:4], torch.full((3,), 2.0**-150, dtype=torch.float64))
    assert y[4] == 0
    with RoundingNoise(seed=3, tiny=0.0):  # relative everywhere: the dtype check's question
        z = x * 1.0
    assert torch.allclose((z - x).abs(), x * 2.0**-24, rtol=1e-6, atol=0)
