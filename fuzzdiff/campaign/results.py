"""What a campaign yields, as plain data: each pair's results (``PairResult``,
its failure as a ``Found``), and the campaign's sum of them (``Campaign``).

A worker sends one PairResult per batch; fuzzdiff.campaign.loop adds a pair's
batches up into one, and ``fuzzdiff run`` prints, reports and groups them.
Nothing here runs anything: it pickles, to a process or a machine.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from fuzzdiff.campaign.schedule import BatchReport
from fuzzdiff.case.case import Case
from fuzzdiff.search.fuzzing import Tally
from fuzzdiff.verdict import Verdict

__all__ = ["Campaign", "Found", "NodeStats", "PairResult"]


@dataclass
class Found:
    """A shrunk failure, as plain data (a FuzzFailure does not survive pickling)."""

    check: str
    target: str
    case: Case
    verdict: Verdict
    record_path: str | None = None
    record_created: bool = False
    blame: dict | None = None  # whose bug it is (fuzzdiff.search.blame.Blame.to_json)
    elsewhere: str = ""  # how it was confirmed outside the worker ("reproduced in a fresh process")


@dataclass
class PairResult:
    """One pair's results: of one batch, as a worker reports it, or of all of a
    pair's batches, as the campaign adds them up (``absorb``)."""

    target: str
    check: str
    tally: Tally
    failure: Found | None = None
    error: str | None = None  # a framework error, or the worker died (crashed=True)
    crashed: bool = False
    cut: bool = False  # stopped by a deadline before its examples were all run
    seconds: float = 0.0
    crash_records: list[str] = field(default_factory=list)
    ref: str = ""  # what cases call the target (its corpus folder)
    family: str = ""
    batches: int = 0
    scores: list[float] = field(default_factory=list)  # the scheduler's score after each batch
    found_at: float | None = None  # seconds into the campaign when its failure (or a known hit) came back
    disturbed: str | None = (
        None  # what left the worker unlike a fresh process (fuzzdiff.guards.torch_state): it is replaced
    )
    first_features: frozenset[str] | None = None  # the input features of its first batch (None: it is one)
    peak_rss_mb: float = 0.0  # the worker's peak resident memory when the batch ended (MiB)

    @property
    def first_batch_features(self) -> frozenset[str]:
        return frozenset(self.tally.features) if self.first_features is None else self.first_features

    @property
    def known(self) -> bool:
        """Some example matched one of the target's known discrepancies
        (fuzzdiff.targets.known): counted, never a failure, and the pair goes on."""
        return bool(self.tally.known)

    @property
    def failed(self) -> bool:
        """A new finding: any failure (a failure matching a known signature
        is never raised as one), and any crash."""
        return self.failure is not None or self.error is not None

    @property
    def ended(self) -> bool:
        """Found what it will find: no further batch."""
        return self.failure is not None or self.error is not None

    @property
    def new_records(self) -> int:
        created = self.failure is not None and self.failure.record_created
        return int(created) + len(self.crash_records)

    def absorb(self, batch: PairResult) -> None:
        if self.batches == 0:
            self.first_features = frozenset(batch.tally.features)
        self.tally.merge(batch.tally)
        self.batches += 1
        self.seconds += batch.seconds
        self.cut = self.cut or batch.cut
        self.crashed = self.crashed or batch.crashed
        if self.failure is None:
            self.failure = batch.failure
        if self.error is None:
            self.error = batch.error
        self.target = batch.target or self.target

    def report(self) -> BatchReport:
        """What this batch tells the scheduler."""
        c = self.tally.counts
        return BatchReport(
            examples=self.tally.examples,
            closest=min(self.tally.closest, 1.0),
            inconclusive=c["inconclusive"],
            unsupported=c["unsupported"],
            features=frozenset(self.tally.features),
            cut=self.cut,
            ended=self.ended,
            known=frozenset(self.tally.known),
            seconds=self.seconds,
        )


@dataclass
class NodeStats:
    """What the workers of one machine did: for the per-node throughput."""

    examples: int = 0
    batches: int = 0
    seconds: float = 0.0  # busy: the sum of its batches' times
    slots: int = 0  # its workers


@dataclass
class Campaign:
    """``results``: one PairResult per pair that started, in the order they
    first started; ``applicable``: every pair the campaign was given, by family."""

    results: list[PairResult] = field(default_factory=list)
    applicable: Counter = field(default_factory=Counter)  # family -> pairs given
    applicable_checks: Counter = field(default_factory=Counter)  # check -> pairs given
    recovered: list[Path] = field(default_factory=list)  # crash records written at the end
    seconds: float = 0.0
    jobs: int = 1
    rounds: int = 0
    batches: int = 0
    seed: int = 0
    nodes: defaultdict[str, NodeStats] = field(default_factory=lambda: defaultdict(NodeStats))
    retried: list[str] = field(default_factory=list)  # batches run again after their worker died
    replaced: list[str] = field(default_factory=list)  # workers replaced: what disturbed their process
    lost: str | None = None  # why the workers were lost before the campaign's end (a cluster gone)
    worker_peak_mb: dict[int, float] = field(default_factory=dict)  # slot -> its workers' peak resident MiB
    narrowed_tours: int = 0  # first tours of pairs that do not compile that round 1's pace narrowed

    @property
    def skipped_for_budget(self) -> int:
        """Pairs that never started."""
        return sum(self.applicable.values()) - len(self.results)

    def covered(self, family: str | None = None) -> tuple[int, int]:
        """(pairs started, pairs given), of one family or all."""
        if family is None:
            return len(self.results), sum(self.applicable.values())
        return sum(r.family == family for r in self.results), self.applicable[family]

    def per_check(self) -> dict[str, Counter]:
        """Per check: pairs, verdicts (examples are their sum), crashes, new
        records, and failing pairs by whose bug they are."""
        table: dict[str, Counter] = defaultdict(Counter)
        for check, n in self.applicable_checks.items():
            table[check]["applicable"] = n
        for r in self.results:
            row = table[r.check]
            row.update(r.tally.counts)
            row["examples"] += r.tally.examples
            row["targets"] += 1
            row["batches"] += r.batches
            row["crashed"] += r.error is not None
            row["known pairs"] += r.known
            row["new records"] += r.new_records
            blame = r.failure.blame if r.failure is not None else None
            if blame:  # the failing pairs by whose bug it is (fuzzdiff.search.blame)
                row["pytorch's" if blame.get("whose") == "pytorch" else "yours"] += 1
                row["localized"] += blame.get("level") is not None  # to an op, a rule or the composition
        return dict(table)

    @property
    def examples(self) -> int:
        return sum(r.tally.examples for r in self.results)

    @property
    def failures(self) -> list[PairResult]:
        return [r for r in self.results if r.failed]
