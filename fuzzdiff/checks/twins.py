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
# look for (both ways see the same point), so a replay, the problem's
# conditioning and float64 decide.
TWINS_LADDER = Ladder(("replay", "conditioning", "float64"))
# How far the conditioning step moves the values: a few float64 roundings of their range.
ROUNDING_NUDGE = 2.0**-40


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

    def conditioning() -> Doubt | None:
        # At a singular point (a rank-one matrix, repeated eigenvalues: a
        # stride-0 layout makes them) a rounding-sized move of the inputs moves
        # the results as far as the two ways differ: which way rounds which
        # way is then noise, not a bug. Each repeated value moves on its own.
        # (Compared with the same values in the same layout, and an argument
        # passed twice still passed twice: neither a layout's own bug nor an
        # aliasing bug must pass for the function's conditioning.)
        spread = case.spread() if case.stride0 else case
        _, here = first(spread) if case.stride0 else (names, a)
        for k in (1, 2):
            _, moved = first(spread.nudged(ROUNDING_NUDGE, seed=k, keep_structure=case.repeated))
            if worst_discrepancy(names, moved, here, tol) is not None:
                return Doubt("the results move as far when the inputs move by rounding: ill-conditioned here")
        return None

    steps: dict[str, Step] = {"replay": replay, "conditioning": conditioning}
    if dtype != torch.float64:
        steps["float64"] = float64
    return TWINS_LADDER.climb(identity, str(d), d.summary(), steps)
