"""Which (target, check) pair a campaign runs next: every pair once, then where the signals are.

A campaign's work comes in *batches*: a few Hypothesis examples of one pair.
Round 1 gives every pair one batch, in the order given, before any pair
gets a second. Each later round is planned when the one before it has
ended, from every batch report so far, applied in (pair, batch) order: the
plan depends on the seed and on what the batches reported, never on which
worker finished first. A round after the first has as many batches as there
are live pairs, shared out in proportion to each pair's score:

    score = 0.5 ** quiet * (1 + signal + 2 * (a known discrepancy not yet matched))

    signal = 0.5 * signal  +  4 * closest              (near-misses)
                           +  2 * inconclusive share    (unsure verdicts)
                           +  1 * new features, at most 3
                           +  2 * (batch stopped by its deadline)

``closest`` is the largest error of a passing verdict as a fraction of what
its check allowed (what ``hypothesis.target`` steers by); ``new features``
counts input features (a stride-0 argument, aliasing, an empty dim, a dtype:
``fuzzdiff.case.features``) the pair's cases reached for the first time.
``quiet`` counts the pair's batches in a row with no signal, so a pair that
only passes halves its share with every batch. A batch that was only
unsupported makes the pair three batches quieter at once. A pair whose batch
failed, crashed or raised a framework error has found what it will find: it
gets no more batches.

A pair whose target declares a known torch discrepancy of its check
(``Target.known``) that no batch has matched yet is where a recorded torch
bug should show: every campaign re-verifies them, and one that stops
showing may have been fixed (``fuzzdiff rerecord`` says which). A match by
any pair verifies the discrepancy for all that declare it.

A budget can end a round before its last batch (round 1 alone may take most
of it), so a round's order says what the budget keeps: each round opens with
one batch for every known discrepancy not yet matched, of a pair that
declares it (the one with the fewest batches so far, then the fastest per
example), the fastest first, and then runs its waves best score first.
"""

from __future__ import annotations

import random
import zlib
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["BatchReport", "PairState", "Scheduler", "Shard", "batch_seed"]

NEAR_WEIGHT = 4.0
INCONCLUSIVE_WEIGHT = 2.0
FEATURE_WEIGHT = 1.0
MAX_NEW_FEATURES = 3
CUT_WEIGHT = 2.0
KNOWN_WEIGHT = 2.0
DECAY = 0.5
UNSUPPORTED_QUIET = 3


@dataclass(frozen=True)
class BatchReport:
    """What one batch tells the scheduler (plain data, from a worker)."""

    examples: int = 0  # verdicts
    closest: float = 0.0  # largest passing error / allowed, in [0, 1)
    inconclusive: int = 0
    unsupported: int = 0
    features: frozenset[str] = frozenset()
    cut: bool = False  # stopped by its deadline before its examples were all run
    ended: bool = False  # failed, crashed or errored: the pair needs no more batches
    known: frozenset[str] = frozenset()  # the known discrepancies it matched (Known.describe())
    seconds: float = 0.0  # how long it ran


@dataclass
class PairState:
    """A pair's standing: how many batches it had, and its score's terms."""

    index: int
    batches: int = 0
    signal: float = 0.0
    quiet: int = 0
    ended: bool = False
    features: set[str] = field(default_factory=set)
    scores: list[float] = field(default_factory=list)  # the score after each batch (for --report)
    unmatched: set[str] = field(default_factory=set)  # known discrepancies declared, none matched yet
    pace: float = 0.0  # seconds per example of its last batch that ran one

    @property
    def score(self) -> float:
        if self.ended:
            return 0.0
        return DECAY**self.quiet * (1.0 + self.signal + KNOWN_WEIGHT * bool(self.unmatched))

    def update(self, report: BatchReport) -> None:
        new = report.features - self.features
        self.features |= report.features
        share = report.inconclusive / report.examples if report.examples else 0.0
        batch = (
            NEAR_WEIGHT * min(max(report.closest, 0.0), 1.0)
            + INCONCLUSIVE_WEIGHT * share
            + FEATURE_WEIGHT * min(len(new), MAX_NEW_FEATURES)
            + CUT_WEIGHT * report.cut
        )
        self.batches += 1
        self.signal = DECAY * self.signal + batch
        if report.examples and report.unsupported == report.examples:
            self.quiet += UNSUPPORTED_QUIET
        else:
            self.quiet = 0 if batch > 0 else self.quiet + 1
        self.ended = self.ended or report.ended
        self.unmatched -= report.known
        if report.examples:
            self.pace = report.seconds / report.examples
        self.scores.append(round(self.score, 4))


def batch_seed(seed: int, key: str, batch: int) -> int:
    """The Hypothesis seed of a pair's ``batch``-th batch: fixed by the campaign's
    seed, distinct per pair and batch, the same on every machine."""
    return zlib.crc32(f"{seed}/{key}/{batch}".encode()) ^ (seed & 0xFFFFFFFF)


@dataclass(frozen=True)
class Shard:
    """``--shard I/N``: the pairs whose key hashes to I (1-based) of N. Each pair's
    shard depends on its key alone, so N machines running shards 1..N cover the
    pairs exactly once, even where their target lists differ."""

    index: int
    count: int

    def __post_init__(self):
        if not (self.count >= 1 and 1 <= self.index <= self.count):
            raise ValueError(f"shard {self.index}/{self.count}: expected I/N with 1 <= I <= N")

    @classmethod
    def parse(cls, text: str) -> Shard:
        index, sep, count = text.partition("/")
        try:
            if not sep:
                raise ValueError
            return cls(int(index), int(count))
        except ValueError:
            raise ValueError(f"--shard {text!r}: expected I/N with 1 <= I <= N, e.g. 2/4") from None

    def holds(self, key: str) -> bool:
        return zlib.crc32(key.encode()) % self.count == self.index - 1

    def select(self, items: Iterable, key=lambda item: item) -> list:
        return [item for item in items if self.holds(key(item))]


class Scheduler:
    """Hands out batches round by round; see the module's docstring for the score.

    ``take(home)`` gives the next batch of the current round, ``(pair index,
    batch number)``, preferring one of a pair whose last batch ran on
    ``home`` (a worker keeps its compiled callables and warm caches); None
    when the round has nothing left to start. ``done`` takes the report of a
    batch; the next round is planned once every batch of this one is done.
    ``rounds`` bounds the campaign (None: until the caller stops asking).
    ``known[i]``: the known discrepancies pair i's target declares for its
    check (Known.describe()), re-verified by the score's last term.
    """

    def __init__(
        self,
        count: int,
        *,
        seed: int = 0,
        rounds: int | None = None,
        known: Sequence[Iterable[str]] | None = None,
    ):
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        if rounds is not None and rounds < 1:
            raise ValueError(f"rounds must be at least 1, got {rounds}")
        if known is not None and len(known) != count:
            raise ValueError(f"known must name the discrepancies of each of the {count} pairs, got {len(known)}")
        self.pairs = [PairState(i, unmatched=set(known[i]) if known else set()) for i in range(count)]
        self.seed = seed
        self.rounds = rounds
        self.round = 1
        self._home: dict[int, int] = {}  # pair -> the worker of its last batch
        self._queues: dict[int | None, deque] = {None: deque((i, 0) for i in range(count))}
        self._running = 0
        self._issued: dict[int, int] = {}  # pair -> batches handed out so far
        self._reports: list[tuple[int, int, BatchReport]] = []
        self.matched: set[str] = set()  # the known discrepancies some batch has matched

    # -- handing out ------------------------------------------------------------------------

    def _pending(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def take(self, home: int | None = None) -> tuple[int, int] | None:
        if not self._pending() and self._running == 0:
            self._advance()
        queue = self._queues.get(home) if home is not None else None
        if not queue:
            queue = self._queues.get(None)
        if not queue:
            queue = max(self._queues.values(), key=len, default=None)
        if not queue:
            return None
        index, batch = queue.popleft()
        self._running += 1
        return index, batch

    def done(self, index: int, batch: int, report: BatchReport, home: int | None = None) -> None:
        self._running -= 1
        if home is not None:
            self._home[index] = home
        self._reports.append((index, batch, report))
        if report.ended:  # no further batch of a pair that has ended, even in this round
            for queue in self._queues.values():
                kept = [job for job in queue if job[0] != index]
                if len(kept) != len(queue):
                    queue.clear()
                    queue.extend(kept)

    def settle(self) -> None:
        """Apply the reports received so far, in (pair, batch) order: at each
        round's end, and once more when a campaign stops mid-round."""
        for index, _, report in sorted(self._reports, key=lambda r: (r[0], r[1])):
            self.pairs[index].update(report)
            self.matched |= report.known
        self._reports.clear()
        for pair in self.pairs:
            pair.unmatched -= self.matched

    def _advance(self) -> bool:
        """Apply this round's reports and plan the next; False when there is none."""
        if self._pending() or self._running:
            return True
        self.settle()
        if self.rounds is not None and self.round >= self.rounds:
            return False
        plan = self.plan(self.round + 1)
        if not plan:
            return False
        self.round += 1
        self._queues = {None: deque()}
        for index in plan:
            batch = self._issued.get(index, self.pairs[index].batches)
            self._issued[index] = batch + 1
            self._queues.setdefault(self._home.get(index), deque()).append((index, batch))
        return True

    def plan(self, round_: int) -> list[int]:
        """Round ``round_``'s batches (pair indices, a pair once per batch it gets):
        as many as there are live pairs, in proportion to score (largest
        remainders, ties broken by a shuffle seeded by the campaign and round),
        after one batch per known discrepancy not yet matched (``reverify``)."""
        live = [p for p in self.pairs if not p.ended and p.score > 0]
        if not live:
            return []
        total = sum(p.score for p in live)
        size = len(live)
        rng = random.Random(f"{self.seed}/{round_}")
        order = list(live)
        rng.shuffle(order)
        quota = {p.index: p.score * size / total for p in order}
        counts = {i: int(q) for i, q in quota.items()}
        left = size - sum(counts.values())
        for p in sorted(order, key=lambda p: quota[p.index] - counts[p.index], reverse=True)[:left]:
            counts[p.index] += 1
        first = self.reverify(order)
        for index in first:
            counts[index] = max(counts[index] - 1, 0)
        order.sort(key=lambda p: p.score, reverse=True)  # stable: the shuffle breaks ties
        plan = list(first)
        # interleaved: a pair's batches spread over the round, not back to back
        waves = max(counts.values())
        for wave in range(waves):
            plan.extend(p.index for p in order if counts[p.index] > wave)
        return plan

    def reverify(self, order: Sequence[PairState]) -> list[int]:
        """One pair for each known discrepancy that no batch has matched yet, a
        different pair each where it can (the discrepancies that fewest pairs
        declare choose first): of those that declare it, the one with the fewest
        batches so far, then the fastest per example, then the first in
        ``order``. The fastest come first: a budget that ends among them has
        re-verified the most."""
        routes: dict[str, list[PairState]] = {}
        for p in order:
            for known in p.unmatched:
                routes.setdefault(known, []).append(p)
        chosen: list[PairState] = []
        for known in sorted(routes, key=lambda k: (len(routes[k]), k)):
            free = [p for p in routes[known] if p not in chosen]
            if free:
                chosen.append(min(free, key=lambda p: (p.batches, p.pace)))
        return [p.index for p in sorted(chosen, key=lambda p: p.pace)]
