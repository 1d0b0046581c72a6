"""What one fuzzing run yields (fuzzdiff.fuzzing.fuzz): its ``Tally`` of
verdicts, or a ``FuzzFailure`` that carries the tally with the shrunk case."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from fuzzdiff.blame import Blame
from fuzzdiff.case import Case
from fuzzdiff.known import Known
from fuzzdiff.verdict import Verdict, short_reason

__all__ = ["FuzzFailure", "Tally"]


class FuzzFailure(AssertionError):
    """A confirmed failure, shrunk; carries the minimal case and its verdict."""

    def __init__(self, check: str, target: str, case: Case, verdict: Verdict):
        self.check, self.target, self.case, self.verdict = check, target, case, verdict
        self.tally: Tally | None = None
        self.record_path: Path | None = None
        self.record_created = False
        self.shrink_cut = False  # shrinking stopped at its time bound (fuzz's shrink_seconds)
        self.blame: Blame | None = None  # whose bug it is, with the evidence (fuzzdiff.blame)
        self.elsewhere = ""  # how it was confirmed outside the run's process (fuzzdiff.fresh)
        self.evidence: dict | None = None  # what the blame rests on, as JSON (fuzzdiff.blame.Evidence)
        super().__init__(
            f"{check} failed for {target}: {verdict.message}\ncase: {json.dumps(case.to_json(), sort_keys=True)}"
        )


@dataclass
class Tally:
    """Verdict counts of one fuzzing run, and the first reason seen per kind.

    Also what a campaign's scheduler steers by (fuzzdiff.schedule): the
    closest call (the largest normalized error that steered Hypothesis) and
    the input features the drawn structures reached (fuzzdiff.features).
    """

    counts: Counter = field(default_factory=Counter)
    reasons: dict[str, str] = field(default_factory=dict)
    closest: float = 0.0
    features: set[str] = field(default_factory=set)
    cases: int = 0  # drawn cases (structures); examples counts their runs (verdicts)
    # Confirmed failures that matched a known discrepancy's signature, by its
    # description: counted, never raised, so the search goes on for new ones.
    known: Counter = field(default_factory=Counter)
    # Why runs were inconclusive or unsupported, by kind and reason (numbers taken out)
    why: Counter = field(default_factory=Counter)
    # Confirmed failures of a root cause found before in the same call (api.check's later runs)
    repeats: Counter = field(default_factory=Counter)
    logs: Counter = field(default_factory=Counter)  # torch's log messages during the run, by text
    cut: bool = False  # stopped by its time budget (fuzz's ``until``) before max_examples

    def add(self, verdict: Verdict) -> None:
        self.counts[verdict.kind] += 1
        self.reasons.setdefault(verdict.kind, verdict.message)
        if verdict.kind in ("inconclusive", "unsupported"):
            self.why[(verdict.kind, short_reason(verdict))] += 1

    def add_known(self, known: Known, verdict: Verdict) -> None:
        self.counts["known"] += 1
        self.reasons.setdefault("known", verdict.message)
        self.known[known.describe()] += 1

    def merge(self, other: Tally) -> None:
        """Add another run's tally (a campaign's batches of one pair)."""
        self.counts.update(other.counts)
        for kind, reason in other.reasons.items():
            self.reasons.setdefault(kind, reason)
        self.closest = max(self.closest, other.closest)
        self.features |= other.features
        self.cases += other.cases
        self.known.update(other.known)
        self.why.update(other.why)
        self.repeats.update(other.repeats)
        self.logs.update(other.logs)
        self.cut = self.cut or other.cut

    @property
    def examples(self) -> int:
        return sum(self.counts.values())

    @property
    def only_unsupported(self) -> bool:
        return self.examples > 0 and self.counts["unsupported"] == self.examples
