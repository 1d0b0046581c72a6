"""One ``fuzzdiff.check`` call's time budget, shared out among its checks.

Each check, when it starts, gets a share of the time left in proportion to
its cost of an example (fuzzdiff.costs), and ends at the first case past it;
a check that ends early leaves its time to the ones after it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from fuzzdiff.costs import example_cost

__all__ = ["BUDGET", "LAST", "MAX_WEIGHT", "MOST", "START_FLOOR", "WRAP_UP", "budget_seconds", "weight", "share"]

BUDGET = 30.0  # seconds a call answers in by default (2 cores), unless max_examples is given
# A check's share of the time left is in proportion to its cost of an example
# (fuzzdiff.costs) relative to grad's, between 1 and MAX_WEIGHT: compile and
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
# last case: a failure's replay in a fresh process and its root cause, the
# last case of a check that ran past its share, the report.
WRAP_UP = 0.1


def budget_seconds(budget: float | None, max_examples: int | None) -> float | None:
    """The call's time budget in seconds, None for no limit."""
    if budget is None:
        return BUDGET if max_examples is None else None
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget > 0:
        raise ValueError(f"budget must be a positive number of seconds (float('inf'): no limit), got {budget!r}")
    return None if budget == float("inf") else float(budget)


def weight(check: str) -> float:
    return min(MAX_WEIGHT, max(1.0, example_cost(check) / example_cost("grad")))


def share(started: float, seconds: float | None, names: Sequence[str]) -> float | None:
    """When the first of ``names`` (the checks still to run) must stop: its
    weight's share of the time left, less the WRAP_UP part of the budget. A
    check that ends early leaves its time to the ones after it."""
    if seconds is None:
        return None
    now = time.monotonic()
    left = max(0.0, started + (1.0 - WRAP_UP) * seconds - now)
    until = now + left * weight(names[0]) / sum(weight(n) for n in names)
    return min(until, now + MOST.get(names[0], 1.0) * seconds)
