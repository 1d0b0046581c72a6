"""Judging two runs that should agree exactly but for rounding.

Shared by the checks that compare whole tensors computed two ways (layout,
alias): a mismatch must repeat, and for low precision it must also be there
when both ways run in float64 on the same values.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from fuzzdiff.case.case import Case
from fuzzdiff.confirm.compare import worst_discrepancy
from fuzzdiff.confirm.ladder import Doubt, Ladder, Step, Survived
from fuzzdiff.confirm.steps import chain, conditioning, float64_persists, identical_to, repeat, rounding_explains
from fuzzdiff.confirm.tolerance import tolerance
from fuzzdiff.paths.result import Result
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict

__all__ = ["judge_twins", "TWINS_LADDER"]

Run = Callable[..., Result]


# Two ways of one computation agree or not: no finite differences, no kink to
# look for (both ways see the same point), so a repeat, the problem's
# conditioning and float64 decide.
TWINS_LADDER = Ladder(("repeat", "conditioning", "float64"))


def judge_twins(identity: str, target: Target, case: Case, first: Run, second: Run, *, check: str) -> Verdict:
    dtype = case.torch_dtype
    tol = tolerance(target, check, dtype)
    names, a = first(case)
    _, b = second(case)
    d = worst_discrepancy(names, a, b, tol)
    if d is None:
        return Verdict("pass")

    steps: dict[str, Step] = {
        "repeat": repeat(lambda: (_tensors(first(case)), _tensors(second(case))), same=identical_to((a, b))),
        "conditioning": conditioning(
            names, ((lambda c: _tensors(first(c)), a), (lambda c: _tensors(second(c)), b)), case, tol
        ),
    }
    if dtype != torch.float64:
        # The two ways must agree in float64 on the same values; if they do,
        # what is left is rounding (summation order, conditioning), and
        # precision is the dtype check's question. Where they do not, their
        # float64 results must be more than float64's own rounding noise.
        tol64 = tolerance(target, check, torch.float64)

        def float64_step() -> Doubt | Survived | None:
            wide = [_tensors(run(case, cast=torch.float64)) for run in (first, second)]
            rerun = [
                (lambda run=run: _tensors(run(case, cast=torch.float64)), here)
                for run, here in zip((first, second), wide)
            ]
            return chain(
                float64_persists(
                    lambda: worst_discrepancy(names, wide[0], wide[1], tol64),
                    "the two agree in float64 on the same values (rounding; see the dtype check)",
                ),
                rounding_explains(names, rerun, tol64, torch.finfo(torch.float64).eps / 2),
            )()

        steps["float64"] = float64_step
    return TWINS_LADDER.climb(identity, str(d), d.summary(), steps)


def _tensors(result: Result) -> list[torch.Tensor]:
    _, tensors = result  # a Result, or (names, tensors)
    return tensors
