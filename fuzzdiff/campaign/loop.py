"""A campaign: fuzz many (target, check) pairs within a time budget, on all cores.

What ``fuzzdiff run`` drives. The work comes in *batches*, a few Hypothesis
examples of one pair (fuzzdiff.campaign.worker's ``BatchSize``), handed out round by
round by ``fuzzdiff.campaign.schedule.Scheduler``: every pair gets one batch before any
pair gets a second, then batches go where the scores say bugs are likely. A
pair that fails or crashes ends there; one whose examples hit a known
discrepancy (fuzzdiff.targets.known) goes on, looking for anything else.

Each batch runs in a worker process (fuzzdiff.campaign.worker), on a ``Pool``
(fuzzdiff.campaign.pool: ``ForkPool``, this machine's processes; fuzzdiff.campaign.cluster's
``RayPool``, a Ray cluster's), so a case that kills its process costs one
batch, not the campaign: its pair is reported as a crash, and the dead
worker's in-flight example becomes a ``crash`` record at the end. A pair's
later batches go to the worker that ran its last one where possible, so
compiled callables (fuzzdiff.paths.compiled caches them per process) and warm
caches are reused. The loop here (scheduling, budget, grace, results) is the
same for every pool; what it yields is fuzzdiff.campaign.results's.

Time: no batch starts after the budget. A running batch stops at its own
deadline (``FuzzConfig.batch_seconds``, and the budget's end) with what it has tallied,
unless it has found a failure: that is still shrunk; a worker still busy
``grace`` seconds after the budget is killed and its batch reported as cut.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from fuzzdiff.campaign.pace import Pace
from fuzzdiff.campaign.pool import ClusterLost, Died, Done, Event, Lost, Pool, PoolFactory, Stopped, fork_pool
from fuzzdiff.campaign.results import Campaign, PairResult
from fuzzdiff.campaign.schedule import Scheduler, batch_seed
from fuzzdiff.campaign.worker import BatchSize, Job, WorkerSetup
from fuzzdiff.case.case import DTYPES, Case
from fuzzdiff.checks import Check
from fuzzdiff.config import BATCH_SECONDS, FuzzConfig
from fuzzdiff.errors import FuzzdiffError
from fuzzdiff.record.files import _safe, iter_records, read_record
from fuzzdiff.record.journal import recover
from fuzzdiff.search.fuzzing import Tally
from fuzzdiff.search.layout_tour import TOUR, first_tour, tour_order
from fuzzdiff.targets.target import Target

__all__ = [
    "BATCH_SECONDS",
    "CHEAP_AUTOGRAD_BACKENDS",
    "CHEAP_BACKENDS",
    "case_options",
    "first_backends",
    "round_one_order",
    "run_campaign",
]


# The backends a compiling check's first batch of a pair draws from, where they
# are configured: no code generation, so that round 1 reaches every compile
# pair within its share of the budget. Later batches draw every configured
# backend. aot_function (either partitioner) costs about what aot_eager does
# (7 examples of 15 catalog targets: 152 s and 134 s against 142 s on 2
# cores) and reaches AOTAutograd's own bugs (synthetic bases, a stride-0
# leaf's gradient) without Dynamo in front of it.
CHEAP_BACKENDS = ("aot_eager", "aot_function", "aot_function_min_cut")
# compiled autograd's, likewise: the capture run as captured, without the dynamo
# trace of the captured graph that costs five sixths of an "eager" batch
CHEAP_AUTOGRAD_BACKENDS = ("ca_eager",)


def first_backends(configured: Sequence[str], cheap: Sequence[str] = CHEAP_BACKENDS) -> tuple[str, ...] | None:
    """The backends of a compiling pair's first batch, those of ``configured``
    that are ``cheap`` (None: all ``configured``)."""
    chosen = tuple(b for b in configured if b in cheap)
    return chosen if chosen and len(chosen) < len(configured) else None


def case_options(
    target: Target, check: Check, dtypes: Sequence[torch.dtype] | None = None, device: str | None = None
) -> dict | None:
    """The case options for one pair under ``--dtypes``/``--device``; None when
    no requested dtype is one both the target and the check take, or the
    target does not run on the requested device."""
    opts: dict[str, Any] = {}
    if dtypes is not None:
        allowed = [d for d in dtypes if d in target.dtypes and (check.dtypes is None or d in check.dtypes)]
        if not allowed:
            return None
        opts["dtypes"] = tuple(allowed)
    if device is not None:
        if device not in target.devices:
            return None
        opts["devices"] = (device,)
    return opts


def _failing_cases(corpus: Path | None) -> Iterator[Case]:
    """The cases of the records under ``corpus`` (none without one; a record
    that does not read is left out: the order it informs is a preference)."""
    if corpus is None or not Path(corpus).is_dir():
        return
    for path in iter_records(corpus):
        try:
            yield read_record(path).case
        except FuzzdiffError:
            continue


def round_one_order(pairs: Iterable[tuple[Target, Check]]) -> list[tuple[Target, Check]]:
    """The order of the first round: a fair sample at every point where a
    budget may cut it. Each (family, check) group is spread evenly over the
    order (its i-th of n pairs at (i + 1/2) / n), so a run stopped at any
    fraction has swept about that fraction of every family and check, the
    catalog's and OpInfo's alike; the checks that compile (a first compile
    costs seconds) come after the rest."""
    groups: dict[tuple[str, str], list[tuple[Target, Check]]] = defaultdict(list)
    for target, check in pairs:
        groups[(target.family, check.name)].append((target, check))
    placed = [
        (check.compiles, (k + 0.5) / len(members), target, check)
        for members in groups.values()
        for k, (target, check) in enumerate(members)
    ]
    placed.sort(key=lambda p: (p[0], p[1]))  # stable: groups in their first-seen order at equal places
    return [(target, check) for _, _, target, check in placed]


# -- the loop -----------------------------------------------------------------------------


@dataclass
class _Running:
    index: int
    number: int
    started: float
    attempt: int = 0


@dataclass
class _Retry:
    job: _Running
    event: Died  # how and where it died
    attempt: int  # the attempt it runs as: its worker's deaths so far


@dataclass(frozen=True)
class _Pair:
    ref: str
    name: str
    family: str
    check: str
    cases: dict
    size: BatchSize
    first_backends: tuple[str, ...] | None = None  # the compile backends of its first batch
    first_autograd_backends: tuple[str, ...] | None = None  # compiled autograd's, likewise
    known: tuple[str, ...] = ()  # the known discrepancies of its check that its target declares
    compiles: bool = False  # its check compiles: its first batch tours fewer classes (first_tour)

    @property
    def key(self) -> str:
        return f"{self.check}/{self.ref}"


def _runnable(
    pairs: Iterable[tuple[Target, Check]],
    config: FuzzConfig,
    size: BatchSize,
    sizing: Callable[[Target, Check], BatchSize] | None,
    dtypes: Sequence[torch.dtype] | None,
    device: str | None,
) -> list[_Pair]:
    """The pairs that can run under ``dtypes`` and ``device``, in the order given, as plain data."""
    cheap = first_backends(config.compile_backends)
    cheap_autograd = first_backends(config.compiled_autograd_backends, CHEAP_AUTOGRAD_BACKENDS)
    todo = []
    for target, check in pairs:
        cases = case_options(target, check, dtypes, device)
        if cases is not None:
            pair_size = size.for_pair(target, check) if sizing is None else sizing(target, check)
            first, first_autograd = (cheap, cheap_autograd) if check.compiles else (None, None)
            known = tuple(k.describe() for k in target.known if check.name in k.checks)
            todo.append(
                _Pair(
                    target.ref,
                    target.name,
                    target.family,
                    check.name,
                    cases,
                    pair_size,
                    first_backends=first,
                    first_autograd_backends=first_autograd,
                    known=known,
                    compiles=check.compiles,
                )
            )
    return todo


@dataclass
class _Loop:
    """A campaign's loop on its pool: start a batch on every free slot, take in
    how batches ended, until no batch is left or the budget is spent. Every
    batch ends in ``finish``: done, cut, crashed, or dropped."""

    campaign: Campaign
    todo: list[_Pair]
    scheduler: Scheduler
    workers: Pool
    start: float  # when the workers were up: the budget is fuzzing time
    batch_seconds: float | None
    on_batch: Callable[[Campaign, PairResult, PairResult], None] | None = None
    on_start: Callable[[int, str | None, str | None], None] | None = None
    tour: tuple[str, ...] = TOUR  # the layout classes of a pair's first batch, in order
    pace: Pace | None = None  # round 1's pace on the pairs that do not compile (None: every tour whole)
    results: dict[int, PairResult] = field(default_factory=dict)  # pair index -> its batches added up
    running: dict[int, _Running] = field(default_factory=dict)  # slot -> its batch
    retries: deque[_Retry] = field(default_factory=deque)  # batches whose worker died, to run again elsewhere
    stopping: bool = False

    def run(self, budget: float | None, grace: float | None) -> None:
        workers = self.workers
        end = None if budget is None else self.start + budget
        hard_end = None if end is None or grace is None else end + grace  # grace is set whenever budget is
        while True:
            now = time.monotonic()
            self.stopping = self.stopping or (end is not None and now >= end)
            while self.retries and (self.stopping or not any(workers.usable(k) for k in range(workers.slots))):
                self.drop(self.retries.popleft())  # no batch starts after the budget, nor without a worker
            for k in range(workers.slots):
                if k not in self.running and not self.stopping and workers.usable(k):
                    self.start_batch(k, now, end)
            if not self.running:  # stopping, or no batch left: take() plans the next round once all are done
                break
            try:
                events = workers.wait(1.0)
            except ClusterLost as lost:
                self.lose(str(lost))
                break
            for event in events:
                self.take_in(event)
            if hard_end is not None and time.monotonic() > hard_end:
                for k in list(self.running):
                    workers.kill(k)
                    self.finish_cut(k)

    def start_batch(self, k: int, now: float, end: float | None) -> None:
        """Free slot ``k`` gets its next batch, or is told there is none."""
        job = self.next_job(k)
        if job is None:
            if self.on_start:
                self.on_start(k, None, None)
            return
        index, number, attempt = job
        pair = self.todo[index]
        limits = [s for s in (self.batch_seconds, None if end is None else end - now) if s is not None]
        tour: tuple[str, ...] = ()
        tour_cases: int | None = None
        if number == 0:
            paced = self.pace if self.pace is not None and not pair.compiles else None
            budget = None if end is None else end - self.start
            cases = paced.cases(len(self.tour), now - self.start, budget) if paced else None
            tour, tour_cases = first_tour(self.tour, pair.compiles, index, cases)
            if paced:
                paced.started += 1
                self.campaign.narrowed_tours += tour_cases is not None
        self.workers.start(
            k,
            Job(
                (index, number),
                pair.ref,
                pair.check,
                min(limits) if limits else None,
                pair.cases,
                batch_seed(self.campaign.seed, pair.key, number),
                replace(pair.size, examples=1) if number == 0 and self.tour else pair.size,  # one tour: a case a class
                None if end is None else end - now,
                pair.first_backends if number == 0 else None,
                tour,
                tour_cases,
                pair.first_autograd_backends if number == 0 else None,
            ),
        )
        self.running[k] = _Running(index, number, now, attempt)
        self.campaign.rounds = self.scheduler.round
        if self.on_start:
            self.on_start(k, pair.name, pair.check)

    def next_job(self, k: int) -> tuple[int, int, int] | None:
        """(pair, batch, attempt): a batch to run again (not where it died,
        where another slot is free), else the scheduler's next."""
        for retry in self.retries:
            if retry.event.slot != k or not retry.event.cause or self.workers.slots == 1:
                self.retries.remove(retry)
                return retry.job.index, retry.job.number, retry.attempt
        job = self.scheduler.take(home=k)
        return None if job is None else (*job, 0)

    def take_in(self, event: Event) -> None:
        """How slot ``event.slot``'s batch ended."""
        if isinstance(event, Done):
            self.finish(event.slot, event.result)
        elif isinstance(event, Stopped):
            self.finish_cut(event.slot)
        elif isinstance(event, Lost):  # again, anywhere, as the same attempt
            again = self.running.pop(event.slot)
            self.retries.append(_Retry(again, Died(event.slot, ""), again.attempt))
        else:
            self.died(event)

    def lose(self, why: str) -> None:
        """The workers are gone: the batches running are cut, those waiting to run again dropped."""
        self.campaign.lost = why
        for k in list(self.running):
            self.finish_cut(k)
        while self.retries:
            self.drop(self.retries.popleft())

    def finish_cut(self, k: int) -> None:
        """Slot ``k``'s batch ends where it stands, as if cut by its deadline."""
        job = self.running[k]
        pair = self.todo[job.index]
        self.finish(k, PairResult(pair.name, pair.check, Tally(), cut=True, seconds=time.monotonic() - job.started))

    def finish(self, k: int, batch: PairResult, job: _Running | None = None) -> None:
        """Slot ``k``'s batch (or ``job``, run there last) has ended."""
        campaign = self.campaign
        job = self.running.pop(k) if job is None else job
        pair = self.todo[job.index]
        batch.ref, batch.family = pair.ref, pair.family
        total = self.results.get(job.index)
        if total is None:
            total = self.results[job.index] = PairResult(
                pair.name, pair.check, Tally(), ref=pair.ref, family=pair.family
            )
            campaign.results.append(total)
        total.absorb(batch)
        if job.number == 0 and not pair.compiles and self.pace is not None:
            self.pace.ended_batch(batch.seconds)
        total.crash_records.extend(batch.crash_records)
        if batch.disturbed:  # the pool replaces its worker (ForkPool, RayPool)
            campaign.replaced.append(f"{pair.key}: {batch.disturbed}")
        if total.found_at is None and (batch.ended or batch.known):
            total.found_at = time.monotonic() - self.start
        campaign.worker_peak_mb[k] = max(campaign.worker_peak_mb.get(k, 0.0), batch.peak_rss_mb)
        node = campaign.nodes[self.workers.node(k)]
        node.examples += batch.tally.examples
        node.batches += 1
        node.seconds += batch.seconds
        campaign.batches += 1
        self.scheduler.done(job.index, job.number, batch.report(), home=k)
        campaign.rounds = self.scheduler.round
        if self.on_batch:
            self.on_batch(campaign, total, batch)

    def died(self, event: Died) -> None:
        """A dead worker costs its batch: run again on another worker, or a crash."""
        job = self.running.pop(event.slot)
        retry = _Retry(job, event, job.attempt + 1)
        if job.attempt < self.workers.retries and not self.stopping:
            self.retries.append(retry)
            self.campaign.retried.append(
                f"{self.todo[job.index].key}: the worker died ({event.cause}); its batch ran again"
            )
        else:
            self.crash(retry)

    def crash(self, retry: _Retry) -> None:
        """The batch's case in flight is a crash: recorded, and the pair ends."""
        job, event = retry.job, retry.event
        records = self.workers.record(event)
        again = f" (its batch had died {job.attempt} time(s) before, on another worker)" if job.attempt else ""
        pair = self.todo[job.index]
        self.finish(
            event.slot,
            PairResult(
                pair.name,
                pair.check,
                Tally(),
                crashed=True,
                error=f"the worker died ({event.cause}) running this pair" + again,
                seconds=time.monotonic() - job.started,
                crash_records=records,
            ),
            job,
        )

    def drop(self, retry: _Retry) -> None:
        """A batch that cannot run again: a crash if its worker died of it, else cut."""
        if retry.event.cause:
            self.crash(retry)
        else:
            pair = self.todo[retry.job.index]
            self.finish(retry.event.slot, PairResult(pair.name, pair.check, Tally(), cut=True), retry.job)


def run_campaign(
    pairs: Iterable[tuple[Target, Check]],
    config: FuzzConfig | None = None,
    *,
    sizing: Callable[[Target, Check], BatchSize] | None = None,
    pool: PoolFactory | None = None,
    on_batch: Callable[[Campaign, PairResult, PairResult], None] | None = None,
    on_start: Callable[[int, str | None, str | None], None] | None = None,
) -> Campaign:
    """Fuzz the pairs at ``config`` (a FuzzConfig; default: the defaults, as
    the driver resolved them from its flags and environment: the workers are
    sent it, and read no environment variable).

    The pairs run in batches of ``config.batch_examples`` examples in
    ``config.jobs`` worker processes (default: every core), round by round
    (fuzzdiff.campaign.schedule), in the order given for the first round;
    no batch starts after ``config.budget`` seconds or ``config.rounds``
    rounds (default: one round without a budget). ``config.batch_seconds``
    bounds one batch's new examples (None: no bound); ``config.grace`` is
    how long after the budget a busy worker may finish shrinking (default: a
    fifth of the budget, at least 30 s). ``config.dtypes`` and
    ``config.device`` narrow the pairs' cases, and leave out a pair that
    cannot take them; ``config.database_url`` is the workers' example
    database; ``config.seed`` seeds every batch (default: a fresh seed, said
    in ``Campaign.seed``); records are written to ``config.corpus``.

    ``sizing(target, check)`` is a pair's batch size (default: the
    configured size narrowed by ``BatchSize.for_pair``;
    fuzzdiff.campaign.plan makes one from the budget). ``pool(setup, jobs,
    pairs)`` makes the workers (default ``fork_pool``, this machine's cores;
    fuzzdiff.campaign.cluster: a Ray cluster's). ``on_start(slot, target,
    check)`` (None, None: the worker has nothing left to do) and
    ``on_batch(campaign, pair, batch)`` report progress.
    """
    config = config or FuzzConfig()
    budget, rounds, grace = config.budget, config.rounds, config.grace
    if budget is not None and grace is None:
        grace = max(30.0, budget / 5)
    if budget is None and rounds is None:
        rounds = 1
    seed = config.seed
    campaign = Campaign(seed=random.SystemRandom().randrange(2**32) if seed is None else seed)
    dtypes = None if config.dtypes is None else [DTYPES[name] for name in config.dtypes]
    todo = _runnable(pairs, config, BatchSize(config.batch_examples), sizing, dtypes, config.device)
    for pair in todo:
        campaign.applicable[pair.family] += 1
        campaign.applicable_checks[pair.check] += 1
    scheduler = Scheduler(len(todo), seed=campaign.seed, rounds=rounds, known=[p.known for p in todo])
    setup = WorkerSetup(config, tuple(sys.path), opinfo=any(p.ref.startswith("opinfo/") for p in todo))
    tour = tour_order(_failing_cases(config.corpus))
    workers = (pool or fork_pool)(setup, config.jobs, len(todo))
    try:
        campaign.jobs = max(1, workers.slots if pool else (config.jobs or os.cpu_count() or 1))
        for k in range(workers.slots):
            campaign.nodes[workers.node(k)].slots += 1
        # The budget is fuzzing time: it starts once the workers are up (the
        # forkserver's first start imports torch, seconds on a busy machine).
        pace = Pace(sum(not p.compiles for p in todo), workers.slots)
        loop = _Loop(
            campaign,
            todo,
            scheduler,
            workers,
            time.monotonic(),
            config.batch_seconds,
            on_batch,
            on_start,
            tour=tour,
            pace=pace,
        )
        loop.run(budget, grace)
        fuzzing = time.monotonic() - loop.start  # the workers' shutdown is not fuzzing time
    finally:
        workers.close()
    scheduler.settle()  # the batches of the last, maybe unfinished, round count too
    for index, total in loop.results.items():
        total.scores = list(scheduler.pairs[index].scores)
    if config.corpus is not None:
        campaign.recovered = recover(config.corpus, cause="a fuzzdiff run worker died")
        _attach(campaign, config.corpus, loop.start)
    campaign.seconds = fuzzing
    return campaign


def _attach(campaign: Campaign, corpus, start: float) -> None:
    """Give each crash record written during the campaign to the crashed pair
    it came from (``corpus/<check>/<target>/<id>.json``). Any worker's next
    fuzz() may have recovered it already, so the corpus is looked at, not
    only what the final recover() returned."""

    crashed = {(r.check, _safe(r.ref or r.target)): r for r in campaign.results if r.crashed}
    if not crashed:
        return
    since = time.time() - (time.monotonic() - start)
    for (check, target), r in crashed.items():
        for path in sorted((Path(corpus) / check / target).glob("*.json")):
            if str(path) in r.crash_records:
                continue  # the pool wrote it, and said so
            try:
                if path.stat().st_mtime < since or json.loads(path.read_text())["verdict"]["kind"] != "crash":
                    continue
            except (OSError, ValueError, KeyError, TypeError):
                continue  # not a record this campaign wrote
            r.crash_records.append(str(path))
