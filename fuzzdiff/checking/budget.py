"""One ``fuzzdiff.check`` call's time budget, shared out among its checks.

Each check, when it starts, gets a share of the time left in proportion to
its cost of an example (``Check.cost``), and begins no case past it (its
first case counted only past the share's length: fuzzdiff.search.fuzzing); a check
that ends early leaves its time to the ones after it. The budget is a ceiling: the case in flight at its end is
stopped (fuzzdiff.guards.timeout), and a failure found late is settled within
SETTLING seconds past it, or said unconfirmed; the call ends within
CEILING seconds past its budget.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from fuzzdiff.checks import get_check

__all__ = [
    "BUDGET",
    "CEILING",
    "LAST",
    "MAX_WEIGHT",
    "MOST",
    "RANDOMNESS",
    "SETTLING",
    "START_FLOOR",
    "WRAP_UP",
    "Spent",
    "budget_seconds",
    "weight",
    "share",
    "reaching",
]

BUDGET = 30.0  # seconds a call answers in by default (2 cores), unless max_examples is given
# A check's share of the time left is in proportion to its cost of an example
# (``Check.cost``) relative to grad's, between 1 and MAX_WEIGHT: compile and
# forward2 get more time than grad, never the whole call.
MAX_WEIGHT = 4.0
# Checks run after the others: a compile case's cost is the least predictable
# (its first compiles, and a data-dependent loop breaks the graph at every
# step: an adaptive ODE solver's took 6 s a case), so a check after it would
# get only what it left, and the user's own bugs (second derivatives, forward
# mode) are likelier in the checks before it.
LAST = ("compile",)
# Seconds of its share a check needs to start at all: compile's first case
# compiles (a second for a small function, 15 s for an ODE solver's loop under
# aot_eager), and a case is never cut in the middle. The others end at their
# first case past the share anyway.
START_FLOOR = {"compile": 5.0}
# The most of the budget a check's share may be, as a fraction: compile, run
# last, would otherwise fill whatever the others left (a cheap function's call
# ran to its whole 30 s, 19 s of it compiling 108 cases) where its strata and a
# few dozen cases of its mix answer.
MOST = {"compile": 1 / 3}
# The part of the budget the checks' shares leave for what follows a check's
# last case: a failure's rerun in a fresh process and its root cause, the
# last case of a check that ran past its share, the report.
WRAP_UP = 0.1
# The part of the budget that asking whether the function draws random numbers
# (fuzzdiff.search.random_calls) may
# take before the checks: a function that takes a second a call would spend
# half a short budget on those calls.
RANDOMNESS = 0.1
# Seconds past the budget the call may take: a failure found at its end is
# settled within SETTLING of them (its rerun in a fresh process, whose bug
# it is), the rest is the report's.
CEILING = 2.0
SETTLING = 1.5


def budget_seconds(budget: float | None, max_examples: int | None) -> float | None:
    """The call's time budget in seconds, None for no limit."""
    if budget is None:
        return BUDGET if max_examples is None else None
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget > 0:
        raise ValueError(f"budget must be a positive number of seconds (float('inf'): no limit), got {budget!r}")
    return None if budget == float("inf") else float(budget)


def weight(check: str) -> float:
    """The check's cost of an example relative to grad's, between 1 and MAX_WEIGHT."""
    return min(MAX_WEIGHT, max(1.0, get_check(check).cost.example / get_check("grad").cost.example))


def share(started: float, seconds: float | None, names: Sequence[str]) -> float | None:
    """When the first of ``names`` (the checks still to run) must stop: its
    weight's share of the time left, less the WRAP_UP part of the budget. A
    check that ends early leaves its time to the ones after it."""
    if seconds is None:
        return None
    now = time.monotonic()
    return now + _share(now - started, seconds, names)


def _share(elapsed: float, seconds: float, names: Sequence[str]) -> float:
    """The seconds of ``share``, ``elapsed`` seconds into the budget."""
    left = max(0.0, (1.0 - WRAP_UP) * seconds - elapsed)
    return min(left * weight(names[0]) / sum(weight(n) for n in names), MOST.get(names[0], 1.0) * seconds)


class Spent(NamedTuple):
    """What a check that ran took: its ``seconds``, whether the budget ``cut``
    it, and the seconds one of its cases took (``case``)."""

    seconds: float
    cut: bool
    case: float


def reaching(name: str, names: Sequence[str], spent: Mapping[str, Spent], before: float, seconds: float) -> int | None:
    """The smallest budget, in tens of seconds above ``seconds``, that would
    have started ``name`` (at least its START_FLOOR of its share left), were
    the checks before it in ``names`` as dear as they were: one that finished
    takes as long again, one that its share cut fills its share at any budget
    (and runs at least one case). ``before``: the seconds spent before the
    first check (asking whether the function is random). None where no budget up to an hour would."""
    order = list(names)
    for budget in range(10 * math.floor(seconds / 10) + 10, 3601, 10):
        elapsed = before
        for k, check in enumerate(order):
            length = _share(elapsed, budget, order[k:])
            if check == name:
                if length > 0 and length >= START_FLOOR.get(name, 0.0):
                    return budget
                break
            ran = spent.get(check, Spent(0.0, True, 0.0))
            elapsed += max(length, ran.case) if ran.cut else ran.seconds
    return None
