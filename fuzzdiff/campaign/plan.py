"""How a campaign's budget is spent on its first round: examples per batch.

Round 1 gives every (target, check) pair one batch. At a fixed batch size its
cost grows with every check and target family added, and a budget that no
longer covers it silently drops whatever comes last. So the batch size is
chosen from the budget: from what a batch of each check costs (``Check.cost``,
re-measured by ``bench/campaign.py``), the largest number of examples at
which every pair but the compiling ones is swept within half the budget,
``compile`` pairs, last in the round, getting the rest at their narrowed
size. What does not fit is said before the campaign starts, with the budget
that would sweep it within half. Later rounds keep the sizes; their scores decide where batches go.

Where a pair's first batch is a layout tour (fuzzdiff.search.layout_tour), it
is one example of a case per layout class, whatever the batch size (a
compiling pair's: of COMPILING_TOUR classes): round 1 costs that, and the size
chosen is the later rounds'.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace

from fuzzdiff.campaign.worker import BatchSize
from fuzzdiff.checks.check import Check, Cost
from fuzzdiff.search.layout_tour import COMPILING_TOUR
from fuzzdiff.targets.target import Target

__all__ = ["Plan", "plan"]

MIN_EXAMPLES = 2
SHARE = 0.5  # of the budget, for round 1; the rest goes where the scores say


def _cost(cost: Cost, examples: int) -> float:
    return cost.batch + examples * cost.example


@dataclass(frozen=True)
class Plan:
    """Round 1's batch sizes for a budget, and what they are expected to cover."""

    examples: int  # examples a batch, before a pair's own narrowing (BatchSize.for_pair)
    budget: float
    jobs: int
    compile_pairs: int
    compile_covered: int  # compile pairs round 1 is expected to reach within the budget
    full_budget: float  # the budget whose share covers every pair at these sizes
    eager_fits: bool  # the pairs that do not compile fit, even at MIN_EXAMPLES
    tour: int = 0  # cases of a pair's first batch, a layout tour (0: none)
    eager_seconds: float = 0.0  # round 1's wall time on the pairs that do not compile

    def size(self, size: BatchSize, target: Target, check: Check) -> BatchSize:
        """The batch size of a pair: its own narrowed size, at most the plan's."""
        own = size.for_pair(target, check)
        return replace(own, examples=max(1, min(own.examples, self.examples)))

    def describe(self) -> str:
        """One line, said before the campaign starts."""
        head = f"{self.budget:g} s on {self.jobs} worker(s): every pair at {self.examples} examples"
        if self.tour:
            head += (
                f" after a first batch of one layout tour (up to {self.tour} cases; "
                f"{COMPILING_TOUR} for a compiling pair)"
            )
        if not self.eager_fits:
            return (
                f"{head}, and even so the pairs that do not compile need about "
                f"{self.eager_seconds:,.0f} s of round 1, more than half the budget "
                f"(--budget {math.ceil(self.full_budget / 100) * 100:,} sweeps every pair within half of it)"
            )
        if self.compile_covered >= self.compile_pairs:
            return f"{head}, compile included"
        return (
            f"{head} (fewer for fixed shapes and compile), compile about {self.compile_covered:,} of "
            f"{self.compile_pairs:,} pairs (--budget {math.ceil(self.full_budget / 100) * 100:,} sweeps them "
            "all within half the budget)"
        )


def plan(pairs: Iterable[tuple[Target, Check]], size: BatchSize, budget: float, jobs: int, tour: int = 0) -> Plan:
    """The largest batch size (at most ``size.examples``) at which a round
    sweeps every pair that does not compile within SHARE of ``jobs`` workers
    for ``budget`` seconds; compile pairs, last in round 1, get what is left
    of the whole budget. ``tour``: a pair's first batch is one example of
    that many cases (a layout tour), which is then round 1's cost."""
    if budget <= 0 or jobs < 1:
        raise ValueError(f"a plan needs a positive budget and at least one worker, got {budget!r}, {jobs!r}")
    eager: Counter = Counter()
    compiling: list[tuple[Cost, int]] = []
    for target, check in pairs:
        own = size.for_pair(target, check).examples
        if check.compiles:
            compiling.append((check.cost, own))
        else:
            eager[(check.cost, own)] += 1
    work = SHARE * budget * jobs

    def eager_cost(k: int) -> float:
        return sum(n * _cost(cost, min(own, k)) for (cost, own), n in eager.items())

    def compile_cost(k: int) -> list[float]:
        return [_cost(cost, min(own, k)) for cost, own in compiling]

    examples = MIN_EXAMPLES
    for k in range(size.examples, MIN_EXAMPLES - 1, -1):
        if eager_cost(k) <= work:
            examples = k
            break
    # round 1's batches: a tour's cases, whatever a pair's own narrowing, or the size's examples
    spent = sum(n * _cost(cost, tour) for (cost, _), n in eager.items()) if tour else eager_cost(examples)
    # round 1 goes on past its share until every pair has had a batch: compile
    # pairs get the rest of the whole budget
    left, covered = budget * jobs - spent, 0
    costs = [_cost(cost, min(tour, COMPILING_TOUR)) for cost, _ in compiling] if tour else compile_cost(examples)
    for c in costs:
        if c > left:
            break
        left -= c
        covered += 1
    return Plan(
        examples=examples,
        budget=budget,
        jobs=jobs,
        compile_pairs=len(compiling),
        compile_covered=covered,
        full_budget=(spent + sum(costs)) / (SHARE * jobs),
        eager_fits=spent <= work,
        tour=tour,
        eager_seconds=spent / jobs,
    )
