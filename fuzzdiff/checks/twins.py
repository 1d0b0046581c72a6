"""Judging two runs that should agree exactly but for rounding.

Shared by the checks that compare whole tensors computed two ways (layout,
alias): a mismatch must replay, and for low precision it must also be there
when both ways run in float64 on the same values.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from fuzzdiff.case import Case
from fuzzdiff.compare import worst_discrepancy
from fuzzdiff.ladder import Doubt, Ladder, Step, Survived
from fuzzdiff.paths.result import Result
from fuzzdiff.targets.target import Target
from fuzzdiff.tolerance import Tolerance, tolerance
from fuzzdiff.verdict import Verdict

__all__ = ["judge_twins", "TWINS_LADDER"]

Run = Callable[..., Result]


# Two ways of one computation agree or not: no finite differences, no kink to
# look for (both ways see the same point), so a replay and float64 decide.
TWINS_LADDER = Ladder(("replay", "float64"))


def judge_twins(identity: str, target: Target, case: Case, first: Run, second: Run, *, check: str) -> Verdict:
    dtype = case.torch_dtype
    tol = tolerance(target, check, dtype)
    names, a = first(case)
    _, b = second(case)
    d = worst_discrepancy(names, a, b, tol)
    if d is None:
        return Verdict("pass")

    def replay() -> Doubt | None:
        _, a2 = first(case)
        _, b2 = second(case)
        exact = Tolerance(0.0, 0.0)
        if worst_discrepancy(names, a2, a, exact) or worst_discrepancy(names, b2, b, exact):
            return Doubt("a replay gave other results (nondeterministic)")
        return None

    def float64() -> Doubt | Survived:
        # The two ways must agree in float64 on the same values; if they do,
        # what is left is rounding (summation order, conditioning), and
        # precision is the dtype check's question.
        _, a64 = first(case, cast=torch.float64)
        _, b64 = second(case, cast=torch.float64)
        d64 = worst_discrepancy(names, a64, b64, tolerance(target, check, torch.float64))
        if d64 is None:
            return Doubt("the two agree in float64 on the same values (rounding; see the dtype check)")
        return Survived(f"float64 ({d64})", {"float64": d64.summary()})

    steps: dict[str, Step] = {"replay": replay}
    if dtype != torch.float64:
        steps["float64"] = float64
    return TWINS_LADDER.climb(identity, str(d), d.summary(), steps)
