"""What one fuzzing run yields (fuzzdiff.search.fuzzing.fuzz): its ``Tally`` of
verdicts, or a ``FuzzFailure`` that carries the tally with the shrunk case,
or ``AllRejected`` (no input drawn was inside the target's domain) with the
tally of what was rejected."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis.errors import Unsatisfiable

from fuzzdiff.case.case import Case
from fuzzdiff.errors import FuzzdiffError
from fuzzdiff.search.blame import Blame
from fuzzdiff.targets.known import Known
from fuzzdiff.verdict import Verdict, short_reason

__all__ = ["AllRejected", "DOMAIN", "Empty", "FuzzFailure", "Tally"]

DOMAIN = "input-domain"  # the check a finding is reported under where the function itself raises at its input

# The dims of a case at size 0, by their names in the spec ("_" an anonymous
# one), sorted: what says which spec bound would leave a rejected draw out.
Empty = tuple[str, ...]


class FuzzFailure(FuzzdiffError, AssertionError):
    """A confirmed failure, shrunk; carries the minimal case and its verdict."""

    def __init__(self, check: str, target: str, case: Case, verdict: Verdict):
        self.check, self.target, self.case, self.verdict = check, target, case, verdict
        self.tally: Tally | None = None
        self.record_path: Path | None = None
        self.record_created = False
        self.shrink_cut = False  # shrinking stopped at its time bound (fuzz's shrink_seconds)
        self.blame: Blame | None = None  # whose bug it is, with the evidence (fuzzdiff.search.blame)
        self.elsewhere = ""  # how it was confirmed outside the run's process (fuzzdiff.search.fresh)
        self.evidence: dict | None = None  # what the blame rests on, as JSON (fuzzdiff.search.blame.Evidence)
        # The runs that failed as this failure (the first, and each shrink step
        # that failed), by their empty dims; of them, those that were their
        # case's first judged run. What the caller takes back where the failure
        # turns out to be no finding of the check (an input outside the domain).
        self.failing: Counter[Empty] = Counter()
        self.failing_cases = 0
        # Why it is not confirmed, where the time budget ended before its rerun
        # in a fresh process: then it is no failure, and fuzz() returns it in
        # its tally's ``unconfirmed`` instead of raising it.
        self.unconfirmed = ""
        super().__init__(
            f"{check} failed for {target}: {verdict.message}\ncase: {json.dumps(case.to_json(), sort_keys=True)}"
        )


@dataclass
class Tally:
    """Verdict counts of one fuzzing run, and the first reason seen per kind.

    Also what a campaign's scheduler steers by (fuzzdiff.campaign.schedule): the
    closest call (the largest normalized error that steered Hypothesis) and
    the input features the drawn structures reached (fuzzdiff.case.features).
    """

    counts: Counter = field(default_factory=Counter)
    reasons: dict[str, str] = field(default_factory=dict)
    closest: float = 0.0
    features: set[str] = field(default_factory=set)
    cases: int = 0  # judged cases (structures with a run neither rejected nor unsupported); examples: all runs
    drawn: int = 0  # cases begun, judged or not (a check stopped at its first case drew one, judged none)
    # Confirmed failures that matched a known discrepancy's signature, by its
    # description: counted, never raised, so the search goes on for new ones.
    known: Counter = field(default_factory=Counter)
    # Why runs were inconclusive or unsupported, by kind and reason (numbers taken out)
    why: Counter = field(default_factory=Counter)
    # Confirmed failures of a root cause found before in the same call (api.check's later runs)
    repeats: Counter = field(default_factory=Counter)
    logs: Counter = field(default_factory=Counter)  # torch's log messages during the run, by text
    cut: bool = False  # stopped by its time budget (fuzz's ``until``) before max_examples
    cut_reason: str = ""  # why, in words: the share spent, a case dearer than what was left, not started
    # Draws rejected as outside the target's domain (Target.invalid, the
    # caller's invalid=, an input-domain error found): neither judged nor
    # failed. By their empty dims; and the names seen at size 0 in judged cases.
    rejected: int = 0
    rejected_empty: Counter = field(default_factory=Counter)
    judged_empty: set[str] = field(default_factory=set)
    # Failures found whose settling the time budget cut short (FuzzFailure.unconfirmed)
    unconfirmed: list[FuzzFailure] = field(default_factory=list)

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
        self.drawn += other.drawn
        self.known.update(other.known)
        self.why.update(other.why)
        self.repeats.update(other.repeats)
        self.logs.update(other.logs)
        self.cut = self.cut or other.cut
        self.cut_reason = self.cut_reason or other.cut_reason
        self.rejected += other.rejected
        self.rejected_empty.update(other.rejected_empty)
        self.judged_empty |= other.judged_empty
        self.unconfirmed += other.unconfirmed

    def set_aside(self, failure: FuzzFailure, kind: str, why: str | None = None, counted: str | None = None) -> None:
        """Count ``failure``'s own failing runs (FuzzFailure.failing), counted
        as ``counted`` (default: its verdict's kind), as ``kind`` instead:
        "rejected" (an input outside the domain after all: no longer judged
        cases), or "inconclusive" for ``why``."""
        runs = sum(failure.failing.values())
        counted = counted or failure.verdict.kind
        self.counts[counted] -= min(runs, self.counts[counted])
        if self.counts[counted] <= 0:
            del self.counts[counted]
        if kind == "rejected":
            self.rejected += runs
            self.rejected_empty.update(failure.failing)
            self.cases -= min(failure.failing_cases, self.cases)
            return
        self.counts[kind] += runs
        if why is not None:
            self.reasons.setdefault(kind, why)
            self.why[(kind, why)] += runs

    @property
    def examples(self) -> int:
        return sum(self.counts.values())

    @property
    def only_unsupported(self) -> bool:
        return self.examples > 0 and self.counts["unsupported"] == self.examples

    @property
    def judged(self) -> int:
        """Runs with an answer: passed, failed, known or inconclusive (not unsupported)."""
        return self.examples - self.counts["unsupported"]


class AllRejected(FuzzdiffError, Unsatisfiable):
    """Every input drawn lay outside the target's domain: Hypothesis's
    Unsatisfiable, with the tally of the rejected draws."""

    def __init__(self, tally: Tally):
        super().__init__(f"all {tally.rejected} inputs drawn lay outside the target's domain")
        self.tally = tally
