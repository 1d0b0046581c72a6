"""A function that reads its dtype's own eps is another function in each dtype.

SI-SDR guards its ratio with ``torch.finfo(x.dtype).eps``: at a perfect
estimate (preds is target, a one-sample signal, which any prediction scales
to) or a zero target the guard decides the value, 10 log10(s / eps), 87 dB
apart between float32 and float64 however exactly each computes. The dtype
check says so ("inconclusive") instead of a failure; a float32 bug where the
guard decides nothing is still found.
"""

from __future__ import annotations

import pytest
import torch

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.case.layout import Alias
from fuzzdiff.case.values import Values
from fuzzdiff.confirm.dtype_constants import LowDtypeConstants
from fuzzdiff.search.runner import run_check
from fuzzdiff.targets.target import Target


def si_sdr(preds, target):
    """Scale-invariant signal-to-distortion ratio, as torchmetrics computes it."""
    eps = torch.finfo(preds.dtype).eps
    alpha = ((preds * target).sum(-1, keepdim=True) + eps) / ((target**2).sum(-1, keepdim=True) + eps)
    scaled = alpha * target
    noise = scaled - preds
    return 10 * torch.log10(((scaled**2).sum(-1) + eps) / ((noise**2).sum(-1) + eps))


def si_sdr_log_in_bfloat16(preds, target):
    """The same, with a float32 "fast path" that takes the logarithm in bfloat16."""
    eps = torch.finfo(preds.dtype).eps
    alpha = ((preds * target).sum(-1, keepdim=True) + eps) / ((target**2).sum(-1, keepdim=True) + eps)
    scaled = alpha * target
    ratio = ((scaled**2).sum(-1) + eps) / (((scaled - preds) ** 2).sum(-1) + eps)
    if ratio.dtype == torch.float32:
        return 10 * torch.log10(ratio.bfloat16()).to(ratio.dtype)  # BUG: 8 bits of mantissa
    return 10 * torch.log10(ratio)


SI_SDR = Target("unit_si_sdr", si_sdr, "preds: *b t, target: *b t")
SPEC = "preds: *b t, target: *b t"


def _case(shape, target_values: Values | None = None, alias: Alias | None = None, seed: int = 0) -> Case:
    preds = Arg(shape, Values(seed=seed))
    target = Arg(shape, target_values or Values(seed=seed + 1), alias=alias)
    return Case("unit", (preds, target), "float32", params={"cotangent": {"seed": 2, "layout": "contiguous", "zeros": 0.0}})


PERFECT = {
    "preds is target": lambda shape: _case(shape, alias=Alias(0, "same")),
    "a one-sample signal": lambda shape: _case((*shape[:-1], 1)),
    "a zero target": lambda shape: _case(shape, Values(seed=1, structure=(("all_zero", 0),))),
}


@pytest.mark.parametrize("shape", [(4,), (2, 3)])
@pytest.mark.parametrize("point", list(PERFECT))
def test_a_value_the_dtypes_eps_decides_is_inconclusive(point, shape):
    """Where the residual's energy is far below eps, SI-SDR is 10 log10(s / eps)
    in each dtype: about 160 dB in float64, 73 in float32. Neither the inputs'
    rounding (a tie passed twice, a one-sample signal, a zero target all stay
    what they are) nor the intermediates' (the guard, not the rounding,
    decides) explains that; float64 with float32's eps does."""
    verdict = run_check("dtype", SI_SDR, PERFECT[point](shape))
    assert verdict.kind == "inconclusive", verdict
    assert "reads its dtype's own eps" in verdict.message and "float32's" in verdict.message, verdict


@pytest.mark.parametrize("seed", range(3))
def test_a_float32_bug_where_the_guard_decides_nothing_still_fails(seed):
    """Off the perfect estimate the guard is a part in 1e7 of the ratio: the
    logarithm taken in bfloat16 is the float32 path's error, and it is found."""
    planted = Target("unit_si_sdr_bf16_log", si_sdr_log_in_bfloat16, SPEC)
    case = _case((3, 5), seed=3 * seed)
    assert run_check("dtype", SI_SDR, case).kind == "pass"
    verdict = run_check("dtype", planted, case)
    assert verdict.kind == "fail", verdict


def test_the_dtype_constants_are_swapped_exactly_where_float64s_reach_an_op():
    x = torch.tensor([1.0, 1e-20], dtype=torch.float64)
    high, low = torch.finfo(torch.float64), torch.finfo(torch.float32)
    with LowDtypeConstants(torch.float32) as mode:
        plus_eps = x + high.eps
        clamped = x.clamp_min(high.tiny)
        made = torch.tensor(high.eps, dtype=torch.float64) * x
        own = x + 1e-8  # the function's own constant: the same in every dtype
    assert torch.equal(plus_eps, x + low.eps)
    assert torch.equal(clamped, x.clamp_min(low.tiny))
    assert torch.equal(made, low.eps * x)
    assert torch.equal(own, x + 1e-8)
    assert mode.met == {"eps", "tiny"}
    with LowDtypeConstants(torch.float32) as mode:
        torch.sin(x) + 1e-8
    assert not mode.met
