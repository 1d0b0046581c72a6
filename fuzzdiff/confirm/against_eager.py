"""Judging a traced or compiled side against eager: one ladder for compile, compiled_autograd and export.

The checks whose other side runs the same ops through a tracer or a
compiler share it: a value mismatch must repeat (both sides alike),
must not vanish at a neighbouring point (a tie, a clamp boundary), and in low
precision the traced side must be further from a float64 eager run than eager
is (fuzzdiff.confirm.steps.float64_margin): a compiler may reassociate sums.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from fuzzdiff.case.case import Case
from fuzzdiff.confirm.compare import result_discrepancy
from fuzzdiff.confirm.ladder import Ladder, Step
from fuzzdiff.confirm.steps import float64_margin, identical_to, neighbours, repeat
from fuzzdiff.confirm.tolerance import Tolerance
from fuzzdiff.paths.result import Result
from fuzzdiff.verdict import Verdict

__all__ = ["judge_against_eager", "Side", "LADDER"]

# repeated, judged against a float64 eager run in low precision, and tried at a neighbouring point
LADDER = Ladder(("repeat", "float64", "neighbours"))

# side(case, cast) -> Result: the eager or the traced side at a case, in a dtype
Side = Callable[[Case, "torch.dtype | None"], Result]


def judge_against_eager(
    identity: str,
    case: Case,
    eager: Side,
    traced: Side,
    tol: Tolerance,
    first: tuple[Result, Result],
    *,
    side: str = "traced",
    note: str = "",
) -> Verdict:
    """``first`` = (eager's result, the ``side``'s) at ``case``: pass, or a
    confirmed failure; ``note`` ends either's message (how the case was run)."""
    want, got = first
    d = result_discrepancy(got, want, tol)
    if d is None:
        return Verdict("pass", note.strip())
    steps: dict[str, Step] = {
        "repeat": repeat(lambda: (traced(case, None), eager(case, None)), same=identical_to((got, want))),
        "neighbours": neighbours(case, lambda c: result_discrepancy(traced(c, None), eager(c, None), tol) is None),
    }
    if case.torch_dtype != torch.float64:
        steps["float64"] = float64_margin(
            got.names,
            got.tensors,
            want.tensors,
            lambda: eager(case, torch.float64).tensors,
            tol,
            side=side,
            doubt=f"the {side} side is about as close to a float64 eager run as eager is (rounding)",
        )
    return LADDER.climb(identity, str(d) + note, d.summary(), steps)
