"""dtype: low-precision results against a float64 run on the very same values.

Outputs and gradients in float32 (or a half type) must match float64 within
the dtype's tolerance, plus what the problem's own conditioning explains: the
float64 results' change when inputs move by float32 rounding.
"""

from __future__ import annotations

import torch

from fuzzdiff.case import Case
from fuzzdiff.checks.check import Check, probe_params
from fuzzdiff.compare import max_abs, mismatch, worst_discrepancy
from fuzzdiff.confirm import F32_NUDGE
from fuzzdiff.paths.eager import evaluate
from fuzzdiff.targets.target import Target
from fuzzdiff.tolerance import Tolerance, tolerance
from fuzzdiff.verdict import Verdict

LOW = (torch.float32, torch.complex64, torch.bfloat16, torch.float16)
CONDITIONING = 100.0


def run(target: Target, case: Case) -> Verdict:
    dtype = case.torch_dtype
    if dtype not in LOW:
        return Verdict("unsupported", f"the dtype check needs a low-precision case, not {dtype}")
    tol = tolerance(target, "dtype", dtype)
    names, low = evaluate(target, case).tensors()
    _, ref = evaluate(target, case, cast=torch.float64).tensors()
    # A gradient that is zero by cancellation (a normalized group of one) is
    # judged on the scale of everything computed, not on its own zero.
    floor = max((max_abs(r) for r in ref), default=0.0)
    d = worst_discrepancy(names, low, ref, tol, scale_floor=floor)
    if d is None:
        return Verdict("pass")
    _, moved = evaluate(target, case.nudged(F32_NUDGE, seed=5), cast=torch.float64).tensors()
    slack = [CONDITIONING * mismatch(r, m)[0] for r, m in zip(ref, moved)]
    d = worst_discrepancy(names, low, ref, tol, slack, scale_floor=floor)
    if d is None:
        return Verdict("inconclusive", "the mismatch is within what float32 rounding of the inputs "
                       "explains (ill-conditioned)")
    _, again = evaluate(target, case).tensors()
    if worst_discrepancy(names, again, low, Tolerance(0.0, 0.0)):
        return Verdict("inconclusive", f"{d}; a replay gave other results (nondeterministic)")
    return Verdict("fail", f"{dtype} vs float64 on the same values: {d}; confirmed by replay "
                   "and a conditioning estimate", d.summary())


CHECK = Check("dtype", run, params=probe_params("cotangent"), dtypes=LOW, doc=__doc__)
