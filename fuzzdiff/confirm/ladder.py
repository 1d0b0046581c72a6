"""The confirmation ladder: the steps a mismatch must survive, in order,
before it is reported as a failure.

Every check declares its ladder as data (``Ladder(("repeat", "float64",
"neighbours"))``) and hands ``climb`` one step per name, built from the
factories of fuzzdiff.confirm.steps; ``climb`` runs them in the ladder's order and
stops at the first that casts doubt. The verdict says which step decided:
"inconclusive: ...; vanishes at a neighbouring point", or "confirmed:
survived a repeat, a float64 reference and a neighbouring point". A finding
that words its own verdict (a target's exception: its message is what known
discrepancies and root causes match) asks ``ascend`` where the climb ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from fuzzdiff.errors import FuzzdiffInterrupt
from fuzzdiff.verdict import Verdict

__all__ = [
    "Ladder",
    "Climbed",
    "ConfirmationCut",
    "Doubt",
    "Survived",
    "Step",
    "STEPS",
    "confirming_by",
    "on_time",
    "repeat_only",
    "words",
]

# What surviving each step says about a mismatch, in a verdict's words.
STEPS = {
    "repeat": "a repeat",
    "eps": "eps/8 and 8*eps",
    "jitter": "a steady reference under eps*(1 +- 0.001)",
    "rounding": "an analytic side steady when every intermediate result moves by rounding",
    "conditioning": "results steady when the values move by rounding",
    "lowered": "results steady when the code's lower-precision intermediate results move by their rounding",
    "float64": "a float64 reference",
    "neighbours": "a neighbouring point",
    "stopping": "a derivative rule's error beyond a solver's stopping tolerance",
}


@dataclass(frozen=True)
class Doubt:
    """A step's reason to call the mismatch inconclusive."""

    why: str


@dataclass(frozen=True)
class Survived:
    """A step survived, in the step's own words (``label``), with evidence.
    An empty label survives without a word: a step that, once run, found
    that it did not apply (no solver's loop behind the rule)."""

    label: str
    errors: Mapping[str, Any] = field(default_factory=dict)


Step = Callable[[], "Doubt | Survived | None"]  # None: survived, in STEPS' words

_REPEAT_ONLY: ContextVar[bool] = ContextVar("fuzzdiff_repeat_only", default=False)


@contextmanager
def repeat_only() -> Iterator[None]:
    """Within the block every ladder climbs its repeat step alone. For a
    failure confirmed already, asked again elsewhere (a fresh process, its
    contiguous twin): the question there is whether the mismatch shows, not
    whether it is one, and on a slow function the whole ladder costs tens of
    its calls."""
    token = _REPEAT_ONLY.set(True)
    try:
        yield
    finally:
        _REPEAT_ONLY.reset(token)


_CONFIRM_BY: ContextVar[float | None] = ContextVar("fuzzdiff_confirm_by", default=None)


class ConfirmationCut(FuzzdiffInterrupt):
    """A climb stopped at its time allowance. ``finding``: the mismatch it was
    confirming, as a "fail" verdict not confirmed (None where the caller words
    its own). A BaseException, so that no ``except Exception`` of a step or of
    the target turns it into a verdict."""

    def __init__(self, finding: Verdict | None = None):
        super().__init__("the mismatch's confirmation ran past its time allowance")
        self.finding = finding


@contextmanager
def confirming_by(instant: float | None) -> Iterator[None]:
    """Within the block a climb stops at ``instant`` (time.monotonic()): checked
    before each step and, through ``on_time``, within the steps that run the
    target many times. None: no allowance."""
    token = _CONFIRM_BY.set(instant)
    try:
        yield
    finally:
        _CONFIRM_BY.reset(token)


def on_time() -> None:
    """ConfirmationCut once the climb's allowance has passed (cheap: a context
    variable and the clock, asked by a step per op it runs)."""
    instant = _CONFIRM_BY.get()
    if instant is not None and time.monotonic() > instant:
        raise ConfirmationCut


@dataclass(frozen=True)
class Ladder:
    """A check's confirmation, as data: the names of its steps, in order. A
    step the caller gives no function for does not apply to this case (the
    float64 step of a float64 case) and is left out of the verdict."""

    steps: tuple[str, ...]

    def __post_init__(self) -> None:
        unknown = [s for s in self.steps if s not in STEPS]
        if unknown or not self.steps:
            raise ValueError(f"a ladder's steps are some of {list(STEPS)}, got {list(self.steps)}")

    def ascend(self, steps: Mapping[str, Step], evidence: Mapping[str, Any] | None = None) -> Climbed:
        """Run ``steps`` in the ladder's order, up to the first doubt."""
        unknown = set(steps) - set(self.steps)
        if unknown:
            raise ValueError(f"steps {sorted(unknown)} are not on the ladder {list(self.steps)}")
        survived: list[str] = []
        errors = dict(evidence or {})
        only_repeat = _REPEAT_ONLY.get()
        for name in self.steps:
            if name not in steps or (only_repeat and name != "repeat"):
                continue
            if survived:  # the repeat shows whether there is anything to confirm
                on_time()
            result = steps[name]()
            if isinstance(result, Doubt):
                return Climbed(tuple(survived), errors, name, result)
            if isinstance(result, Survived):
                if result.label:
                    survived.append(result.label)
                errors.update(result.errors)
            else:
                survived.append(STEPS[name])
        return Climbed(tuple(survived), errors)

    def climb(self, identity: str, finding: str, evidence: Mapping[str, Any], steps: Mapping[str, Step]) -> Verdict:
        """The verdict on ``finding`` (a mismatch of ``identity``): "fail" once
        every step survives, else "inconclusive" with the deciding step's doubt."""
        try:
            climbed = self.ascend(steps, evidence)
        except ConfirmationCut as cut:
            raise ConfirmationCut(Verdict("fail", f"{identity}: {finding}", dict(evidence))) from cut
        if climbed.doubt is not None:
            return Verdict(
                "inconclusive",
                f"{identity}: {finding}; {climbed.doubt.why}",
                {**climbed.errors, "decided_by": climbed.decided_by},
            )
        if not climbed.survived:
            return Verdict("fail", f"{identity}: {finding}; repeated, confirmed before", climbed.errors)
        return Verdict("fail", f"{identity}: {finding}; confirmed: survived {words(climbed.survived)}", climbed.errors)


@dataclass(frozen=True)
class Climbed:
    """Where a climb ended: at the step that cast doubt (``decided_by``,
    ``doubt``), or past every step. ``survived`` says what each step passed
    said, in order; ``errors`` is the evidence with what the steps added."""

    survived: tuple[str, ...]
    errors: dict[str, Any]
    decided_by: str | None = None
    doubt: Doubt | None = None


def words(items: Sequence[str]) -> str:
    """Items in words: "a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
