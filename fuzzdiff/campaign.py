"""A campaign: fuzz many (target, check) pairs within a time budget.

What ``fuzzdiff run`` drives. It keeps going past failures (each pair is
independent), tallies every verdict per check, and reports failures with the
shrunk case so nothing found is lost.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable

from hypothesis import HealthCheck, Phase, settings as hsettings

from fuzzdiff.checks import Check
from fuzzdiff.fuzzing import FuzzFailure, Tally, fuzz
from fuzzdiff.targets.target import Target

__all__ = ["Campaign", "PairResult", "run_campaign"]


@dataclass
class PairResult:
    target: str
    check: str
    tally: Tally
    failure: FuzzFailure | None = None
    error: str | None = None
    seconds: float = 0.0


@dataclass
class Campaign:
    results: list[PairResult] = field(default_factory=list)
    skipped_for_budget: int = 0

    def per_check(self) -> dict[str, Counter]:
        table: dict[str, Counter] = defaultdict(Counter)
        for r in self.results:
            row = table[r.check]
            row.update(r.tally.counts)
            row["examples"] += r.tally.examples
            row["targets"] += 1
            row["errors"] += r.error is not None
        return dict(table)

    @property
    def failures(self) -> list[PairResult]:
        return [r for r in self.results if r.failure is not None or r.error is not None]


def run_campaign(pairs: Iterable[tuple[Target, Check]], *, max_examples: int, budget: float | None,
                 seed: int | None = None, corpus=None,
                 on_result: Callable[[PairResult], None] | None = None) -> Campaign:
    """Fuzz each pair with ``max_examples``; stop starting new pairs after ``budget`` seconds."""
    campaign = Campaign()
    pairs = list(pairs)
    start = time.monotonic()
    opts = dict(max_examples=max_examples, deadline=None, database=None, print_blob=False,
                suppress_health_check=list(HealthCheck),
                phases=[p for p in Phase if p != Phase.explain])
    for n, (target, check) in enumerate(pairs):
        if budget is not None and time.monotonic() - start > budget:
            campaign.skipped_for_budget = len(pairs) - n
            break
        t0 = time.monotonic()
        result = PairResult(target.name, check.name, Tally())
        try:
            result.tally = fuzz(check, target, settings=hsettings(**opts), seed=seed, corpus=corpus)
        except FuzzFailure as failure:
            result.failure = failure
            result.tally = failure.tally or result.tally
        except Exception as e:  # noqa: BLE001 - a framework error must not end the campaign
            result.error = f"{type(e).__name__}: {e}"
        result.seconds = time.monotonic() - t0
        campaign.results.append(result)
        if on_result:
            on_result(result)
    return campaign
