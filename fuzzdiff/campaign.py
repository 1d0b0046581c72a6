"""A campaign: fuzz many (target, check) pairs within a time budget, on all cores.

What ``fuzzdiff run`` drives. The work comes in *batches*, a few Hypothesis
examples of one pair (``BatchSize``), handed out round by round by
``fuzzdiff.schedule.Scheduler``: every pair gets one batch before any pair
gets a second, then batches go where the scores say bugs are likely. A pair
that fails or crashes ends there; one whose examples hit a known discrepancy
(fuzzdiff.known) goes on, looking for anything else.

Each batch runs in a worker process, forked from a forkserver that imported
torch and fuzzdiff once (forking the parent itself, which may hold torch
threads, is what does not mix; spawning would import torch once per worker),
so a case that kills its process costs one batch, not the campaign: its pair
is reported as a crash, a fresh worker takes the next batch, and
``fuzzdiff.journal.recover`` turns the dead worker's in-flight example into a
``crash`` record at the end. A pair's later batches go to the worker that ran
its last one where possible, so compiled callables (fuzzdiff.paths.compiled
caches them per process) and warm caches are reused.

Where batches run is a ``Pool`` with a small interface (start a batch on a
slot; wait for batches done, workers dead or stopped): ``ForkPool`` here, and
``fuzzdiff.cluster.RayPool`` on a Ray cluster. The loop of ``run_campaign``
(scheduling, budget, grace, results) is the same for both.

Time: no batch starts after the budget. A running batch stops at its own
deadline (``batch_seconds``, and the budget's end) with what it has tallied,
unless it has found a failure: that is still shrunk; a worker still busy
``grace`` seconds after the budget is killed and its batch reported as cut.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import signal
import socket
import sys
import time
import warnings
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Protocol

import torch
from hypothesis import HealthCheck, Phase, Verbosity
from hypothesis import settings as hsettings
from hypothesis.configuration import set_hypothesis_home_dir

from fuzzdiff import torch_state
from fuzzdiff.case import Case
from fuzzdiff.checks import Check, get_check
from fuzzdiff.config import FuzzConfig
from fuzzdiff.corpus import _safe
from fuzzdiff.database import example_database
from fuzzdiff.fresh import FreshProcess
from fuzzdiff.fuzzing import FuzzFailure, Tally, fuzz, settle_heap
from fuzzdiff.journal import STOPS, forget, recover
from fuzzdiff.paths.vmap import stop_recording_fallbacks
from fuzzdiff.schedule import BatchReport, Scheduler, batch_seed
from fuzzdiff.targets import get_target
from fuzzdiff.targets.target import Target
from fuzzdiff.unsupported import unsupported_reason
from fuzzdiff.verdict import Verdict

__all__ = [
    "Campaign",
    "PairResult",
    "Found",
    "BatchSize",
    "NodeStats",
    "Job",
    "Pool",
    "ForkPool",
    "ClusterLost",
    "Done",
    "Died",
    "Lost",
    "Stopped",
    "run_campaign",
    "run_batch",
    "start_worker",
    "preload",
    "case_options",
    "round_one_order",
    "BATCH_SECONDS",
]

BATCH_SECONDS = 10.0  # a batch's own deadline: one slow pair cannot hold a worker for long


@dataclass(frozen=True)
class BatchSize:
    """One batch: ``examples`` Hypothesis examples of ``structures`` drawn cases,
    each run at ``variants`` value-and-probe seeds (fuzzdiff.fuzzing.fuzz).

    ``for_pair`` narrows it to ``examples // NARROW`` (at least 2, at most
    ``examples``) where more examples buy little: a target whose spec fixes
    every size (an OpInfo sample) has few distinct structures, and a check
    that compiles pays seconds per example for what an eager check gets in
    milliseconds.
    """

    examples: int = 48
    structures: int = 1
    variants: int = 2

    def __post_init__(self):
        for name in ("examples", "structures", "variants"):
            if getattr(self, name) < 1:
                raise ValueError(f"a batch's {name} must be at least 1, got {getattr(self, name)}")

    def for_pair(self, target: Target, check: Check) -> BatchSize:
        fixed = all(d.kind == "fixed" for a in target.args for d in a.dims)
        if fixed or check.compiles:
            return replace(self, examples=min(self.examples, max(2, self.examples // NARROW)))
        return self


NARROW = 8

# The backends a compiling check's first batch of a pair draws from, where they
# are configured: no code generation, so that round 1 reaches every compile
# pair within its share of the budget. Later batches draw every configured
# backend. aot_function (either partitioner) costs about what aot_eager does
# (7 examples of 15 catalog targets: 152 s and 134 s against 142 s on 2
# cores) and reaches AOTAutograd's own bugs (synthetic bases, a stride-0
# leaf's gradient) without Dynamo in front of it.
CHEAP_BACKENDS = ("aot_eager", "aot_function", "aot_function_min_cut")


def first_backends(configured: Sequence[str]) -> tuple[str, ...] | None:
    """The backends of a compile pair's first batch (None: all ``configured``)."""
    cheap = tuple(b for b in configured if b in CHEAP_BACKENDS)
    return cheap if cheap and len(cheap) < len(configured) else None


@dataclass
class Found:
    """A shrunk failure, as plain data (a FuzzFailure does not survive pickling)."""

    check: str
    target: str
    case: Case
    verdict: Verdict
    record_path: str | None = None
    record_created: bool = False
    blame: dict | None = None  # whose bug it is (fuzzdiff.blame.Blame.to_json)
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
    disturbed: str | None = None  # what left the worker unlike a fresh process (fuzzdiff.torch_state): it is replaced

    @property
    def known(self) -> bool:
        """Some example matched one of the target's known discrepancies
        (fuzzdiff.known): counted, never a failure, and the pair goes on."""
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
            if blame:  # the failing pairs by whose bug it is (fuzzdiff.blame)
                row["pytorch's" if blame.get("whose") == "pytorch" else "yours"] += 1
        return dict(table)

    @property
    def examples(self) -> int:
        return sum(r.tally.examples for r in self.results)

    @property
    def failures(self) -> list[PairResult]:
        return [r for r in self.results if r.failed]


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


# -- the worker side ----------------------------------------------------------------------


class _Stop(BaseException):
    """Ends a batch's Hypothesis run at its deadline (not an Exception: nothing catches it)."""


class _Deadline:
    """Stops a batch at its deadline, keeping its tally: the check's verdicts are
    mirrored here (fuzz() keeps its own tally to itself), exactly so while the
    deadline is armed. Disarmed by the first failure or error, so that
    shrinking it is not cut short (only the campaign's hard stop ends that)."""

    def __init__(self, seconds: float | None):
        self.at = None if seconds is None else time.monotonic() + seconds
        self.tally = Tally()

    def wrap(self, check: Check) -> Check:
        real = check.run

        def run(target: Target, case: Case) -> Verdict:
            if self.at is not None and time.monotonic() > self.at:
                raise _Stop
            try:
                verdict = real(target, case)
            except Exception as e:  # noqa: BLE001 - run_check judges it; mirror its verdict
                reason = unsupported_reason(e)
                if reason is None:
                    self.at = None  # a finding (or inconclusive): let it replay and shrink
                else:
                    self.tally.add(Verdict("unsupported", reason))
                raise
            self.tally.add(verdict)
            if verdict.failed:
                self.at = None
            return verdict

        return replace(check, run=run)


@dataclass(frozen=True)
class Job:
    """One batch, as a worker receives it: plain data, to a process or a machine."""

    key: tuple[int, int]  # (pair index, batch number)
    target: str  # the target's ref
    check: str
    deadline: float | None  # seconds from the batch's start
    cases: dict
    seed: int
    size: BatchSize
    until: float | None = None  # seconds left of the budget when it was sent (a worker with a queue needs it)
    backends: tuple[str, ...] | None = None  # the compile backends to draw from (None: the configured ones)


def run_batch(job: Job, opts: dict) -> PairResult:
    """Run one batch in a worker (``opts``: the campaign's, as ``start_worker``
    set them; its settings are ``opts["config"]``, the campaign's FuzzConfig)."""
    t0 = time.monotonic()
    result = PairResult(job.target, job.check, Tally(), ref=job.target)
    clock = _Deadline(job.deadline)
    disturbed = torch_state.disturbances()
    try:
        target, check = get_target(job.target), get_check(job.check)
        result.target = target.name
        settings = hsettings(
            max_examples=job.size.examples,
            deadline=None,
            database=opts["database"],
            print_blob=False,
            verbosity=Verbosity.quiet,
            suppress_health_check=list(HealthCheck),
            phases=[p for p in Phase if p != Phase.explain],
        )
        config = _config(opts)
        if job.backends is not None:
            config = replace(config, compile_backends=job.backends)
        result.tally = fuzz(
            clock.wrap(check),
            target,
            settings=settings,
            config=config,
            seed=job.seed,
            variants=job.size.variants,
            structures=job.size.structures,
            timeout=opts["timeout"],
            recover_crashes=False,
            journal_dir=opts.get("journal"),
            fresh=_fresh_process(opts),
            **job.cases,
        )
    except _Stop:
        result.tally, result.cut = clock.tally, True
    except FuzzFailure as failure:
        result.failure = Found(
            failure.check,
            failure.target,
            failure.case,
            failure.verdict,
            None if failure.record_path is None else str(failure.record_path),
            failure.record_created,
            None if failure.blame is None else failure.blame.to_json(),
            failure.elsewhere,
        )
        result.tally = failure.tally or result.tally
    except Exception as e:  # noqa: BLE001 - a framework error must not end the campaign
        result.error = f"{type(e).__name__}: {e}"
    torch_state.repaired()  # what the batch's leftovers changed after its runs, back to the worker's start
    if torch_state.disturbances() > disturbed:
        result.disturbed = torch_state.last_disturbance()
    result.seconds = time.monotonic() - t0
    return result


_FRESH: list[FreshProcess] = []  # the worker's own replaying process, once it has one


def _fresh_process(opts: dict) -> FreshProcess | None:
    """The worker's process that replays its failures afresh (fuzzdiff.fresh),
    started on its first failure; None where the campaign does without."""
    if not opts.get("isolate", True):
        return None
    if not _FRESH:
        _FRESH.append(FreshProcess())
    return _FRESH[0]


def _config(opts: dict) -> FuzzConfig:
    """The campaign's settings, as its driver resolved them (the defaults where it gave none)."""
    return opts.get("config") or FuzzConfig()


def start_worker(opts: dict) -> None:
    """Make this process a campaign worker, once, before its first batch."""
    # A worker starts with the parent's sys.path and environment of some earlier
    # moment (the forkserver's start, a cluster node's): its sys.path is brought
    # up to date (user targets are imported from there), its environment never.
    # Its settings came resolved, in opts["config"]: fuzz() reads no variable,
    # and of Hypothesis's, what a worker needs is where its storage is (the
    # constants it caches, the example database): the driver's, said here.
    sys.path[:0] = [p for p in opts["sys_path"] if p not in sys.path]
    config = _config(opts)
    if config.hypothesis_storage is not None:
        set_hypothesis_home_dir(config.hypothesis_storage)  # a process of fuzzdiff's own
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    warnings.simplefilter("ignore")  # torch's UserWarnings would tear the live display
    # and so would its C++ warnings, printed by the hundred: vmap's fallback warns on every call of an
    # op without a batching rule (the catalog's custom op) while the vmap check records fallbacks
    stop_recording_fallbacks()
    torch.set_num_threads(1)  # one core per worker: the campaign runs one worker per core
    settle_heap()  # a process of fuzzdiff's own
    torch_state.settle()  # the state every batch starts from, and comes back to
    if opts["database_url"] is not None:
        opts["database"] = example_database(opts["database_url"] or None, local=config.example_dir)


def _worker(conn, opts: dict) -> None:
    """Run the batches the parent sends, one at a time, until it sends None."""
    start_worker(opts)
    while True:
        try:
            job = conn.recv()
        except EOFError:
            break
        if job is None:
            break
        conn.send((job.key, run_batch(job, opts)))
    for fresh in _FRESH:
        fresh.close()


# -- where batches run --------------------------------------------------------------------


@dataclass
class Done:
    """Slot ``slot``'s batch ended with ``result``."""

    slot: int
    result: PairResult


@dataclass
class Died:
    """Slot ``slot``'s worker died running its batch; ``inflight``: what the
    pool knows of its example in flight (for ``Pool.record``)."""

    slot: int
    cause: str
    inflight: Any = None


@dataclass
class Lost:
    """Slot ``slot``'s batch was lost with a worker that died running another
    batch of the same call (fuzzdiff.cluster): it runs again, not a crash."""

    slot: int


@dataclass
class Stopped:
    """Slot ``slot``'s worker was told to stop (a signal): its batch was interrupted, not crashed."""

    slot: int


Event = Done | Died | Lost | Stopped


class Pool(Protocol):
    """The workers a campaign runs its batches on: ``slots`` of them, each
    running one batch at a time. The campaign's loop (``run_campaign``) owns
    the scheduling, the budget and the results; a pool only runs batches and
    says how they ended. ``retries``: how many times a batch whose worker
    died is run again, on another worker, before its case is a crash."""

    slots: int
    retries: int

    def start(self, k: int, job: Job) -> None: ...

    def wait(self, timeout: float) -> list[Event]:
        """The batches that ended within ``timeout`` seconds (maybe none)."""
        ...

    def kill(self, k: int) -> None:
        """Stop slot ``k``'s batch now (the budget's grace is over): cut, not crashed."""
        ...

    def record(self, died: Died) -> list[str]:
        """Write the crash record of a dead worker's case in flight; the paths
        (or none, where they are found later: ``_attach``)."""
        ...

    def usable(self, k: int) -> bool:
        """Whether slot ``k`` can take a batch (a slot whose machine is gone cannot)."""
        ...

    def node(self, k: int) -> str:
        """The machine slot ``k`` runs on."""
        ...

    def close(self) -> None: ...


class ClusterLost(RuntimeError):
    """The pool's workers are gone (a cluster that disappeared): the campaign
    ends with the results so far."""


@dataclass
class _Process:
    proc: Any
    conn: Any
    busy: bool = False


class ForkPool:
    """One worker process per slot, forked from a forkserver that imported torch
    and fuzzdiff once; a dead worker is replaced at its slot's next batch.
    Its journal entries are on this machine's disk (the corpus), where the
    campaign's end (or any later fuzz()) recovers them."""

    retries = 0  # a crash is the case's: the local machine is not lost under it

    def __init__(self, opts: dict, slots: int, preload: Sequence[str]):
        self.opts, self.slots = opts, slots
        self.corpus = _config(opts).corpus
        self.ctx = mp.get_context("forkserver")
        self.ctx.set_forkserver_preload(list(preload))
        self.replaced = 0  # workers replaced because something disturbed their process
        self.workers: list[_Process] = []
        for _ in range(slots):
            self.workers.append(self._spawn())

    def _spawn(self) -> _Process:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker, args=(child, self.opts), daemon=True)
        proc.start()
        child.close()
        return _Process(proc, parent)

    def start(self, k: int, job: Job) -> None:
        if not self.workers[k].proc.is_alive():
            self.workers[k] = self._spawn()
        worker = self.workers[k]
        worker.conn.send(job)
        worker.busy = True

    def wait(self, timeout: float) -> list[Event]:
        busy = [(k, w) for k, w in enumerate(self.workers) if w.busy]
        ready = wait([w.conn for _, w in busy] + [w.proc.sentinel for _, w in busy], timeout=timeout)
        events: list[Event] = []
        for k, worker in busy:
            if worker.conn in ready:
                try:
                    _, result = worker.conn.recv()
                except (EOFError, OSError):
                    pass  # died: reported below once the process is gone
                else:
                    worker.busy = False
                    if result.disturbed:  # its next batches would run in a process unlike a fresh one
                        self._replace(k)
                    events.append(Done(k, result))
                    continue
            if worker.proc.sentinel in ready or not worker.proc.is_alive():
                worker.proc.join(timeout=5)
                worker.busy = False
                if _stopped(worker.proc.exitcode):  # its batch ends there, as if cut by its deadline
                    _forget_inflight(self.corpus, worker.proc.pid)
                    events.append(Stopped(k))
                else:
                    events.append(Died(k, _signal_name(worker.proc.exitcode)))
        return events

    def _replace(self, k: int) -> None:
        """An idle worker, stopped and forked anew from the forkserver."""
        worker = self.workers[k]
        try:
            worker.conn.send(None)
        except OSError:
            pass
        worker.proc.join(timeout=5)
        if worker.proc.is_alive():
            worker.proc.kill()
            worker.proc.join(timeout=5)
        worker.conn.close()
        self.workers[k] = self._spawn()
        self.replaced += 1

    def kill(self, k: int) -> None:
        worker = self.workers[k]
        worker.proc.kill()
        worker.proc.join(timeout=5)
        worker.busy = False
        _forget_inflight(self.corpus, worker.proc.pid)

    def record(self, died: Died) -> list[str]:
        if self.corpus is not None:  # its case in flight, recorded now with how it died
            recover(self.corpus, cause=f"a fuzzdiff run worker died ({died.cause})")
        return []  # found by _attach at the end: any worker's fuzz() may have recovered it first

    def usable(self, k: int) -> bool:
        return True

    def node(self, k: int) -> str:
        return HOST

    def close(self) -> None:
        for worker in self.workers:
            if worker.proc.is_alive():
                if not worker.busy:
                    try:
                        worker.conn.send(None)
                    except OSError:
                        pass
                    worker.proc.join(timeout=5)
                if worker.proc.is_alive():  # interrupted mid-batch, or did not stop
                    worker.proc.kill()
                    worker.proc.join(timeout=5)
                    _forget_inflight(self.corpus, worker.proc.pid)
            worker.conn.close()


HOST = socket.gethostname()

PoolFactory = Callable[[dict, "int | None", int], Pool]


def preload(opts: dict) -> list[str]:
    """What a worker imports before its first batch (the targets' modules).
    Not torch's OpInfo database where a GPU is visible: importing it asks the
    device's capability, which initializes CUDA in the forkserver, and no
    process forked from there can use CUDA again ("Cannot re-initialize CUDA in
    forked subprocess"); each worker imports it for itself then."""
    modules = ["fuzzdiff.campaign", "fuzzdiff.targets.catalog"]
    if opts["opinfo"] and not torch.cuda.is_available():
        modules.append("torch.testing._internal.common_methods_invocations")  # op_db: seconds, once
    return modules


def fork_pool(opts: dict, jobs: int | None, pairs: int) -> ForkPool:
    """The local pool: ``jobs`` workers (default: every core), no more than pairs."""
    return ForkPool(opts, min(jobs or os.cpu_count() or 1, pairs), preload(opts))


# -- the parent side ----------------------------------------------------------------------


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

    @property
    def key(self) -> str:
        return f"{self.check}/{self.ref}"


def _signal_name(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


def _stopped(code: int | None) -> bool:
    """Whether a worker died of a stop request (SIGTERM, SIGHUP: a signal to the
    run's process group, or to the worker alone), which interrupts, not crashes."""
    return code is not None and -code in STOPS


def _forget_inflight(corpus, pid: int) -> None:
    """A worker the campaign killed (its deadline, the run interrupted), or one
    told to stop, did not crash: drop its journal entries so that recovery
    does not record its case as a crash."""
    if corpus is not None:
        forget(corpus, pid=pid)


def run_campaign(
    pairs: Iterable[tuple[Target, Check]],
    *,
    config: FuzzConfig | None = None,
    size: BatchSize = BatchSize(),
    budget: float | None = None,
    rounds: int | None = None,
    seed: int | None = None,
    corpus=None,
    jobs: int | None = None,
    dtypes: Sequence[torch.dtype] | None = None,
    device: str | None = None,
    batch_seconds: float | None = BATCH_SECONDS,
    grace: float | None = None,
    timeout: float | None = None,
    database_url: str | None = None,
    pool: PoolFactory | None = None,
    on_batch: Callable[[Campaign, PairResult, PairResult], None] | None = None,
    on_start: Callable[[int, str | None, str | None], None] | None = None,
    sizing: Callable[[Target, Check], BatchSize] | None = None,
) -> Campaign:
    """Fuzz the pairs in batches of ``size`` in ``jobs`` worker processes
    (default: every core), round by round (fuzzdiff.schedule), in the order
    given for the first round; stop starting batches after ``budget``
    seconds or ``rounds`` rounds (default: one round without a budget).

    ``batch_seconds`` bounds one batch's new examples (None: no bound);
    ``grace`` is how long after the budget a busy worker may finish shrinking
    (default: a fifth of the budget, at least 30 s). ``database_url``: None
    for no Hypothesis example database, "" for the local directory, or a
    Redis URL shared beside it. ``pool(opts, jobs, pairs)`` makes the workers
    (default ``fork_pool``, this machine's cores; fuzzdiff.cluster: a Ray
    cluster's). ``on_start(slot, target, check)`` (None, None: the worker has
    nothing left to do) and ``on_batch(campaign, pair, batch)`` report progress.
    ``sizing(target, check)`` is a pair's batch size (default:
    ``size.for_pair``; fuzzdiff.plan makes one from the budget).

    ``config`` (a FuzzConfig; default: the defaults) is the settings every
    worker's fuzz() runs at, as the driver resolved them from its flags and
    environment: the workers are sent it, and read no environment variable.
    ``corpus`` (where records are written) is folded into it, and overrides
    it; ``timeout``, where given, is every example's limit itself (fuzz()'s).
    """
    if budget is not None and grace is None:
        grace = max(30.0, budget / 5)
    if budget is None and rounds is None:
        rounds = 1
    campaign = Campaign(seed=random.SystemRandom().randrange(2**32) if seed is None else seed)
    todo: list[_Pair] = []
    declared: list[list[str]] = []  # per pair, the known discrepancies of its check its target declares
    config = FuzzConfig.resolve(base=config, corpus=corpus)
    cheap = first_backends(config.compile_backends)
    for target, check in pairs:
        cases = case_options(target, check, dtypes, device)
        if cases is not None:
            pair_size = size.for_pair(target, check) if sizing is None else sizing(target, check)
            first = cheap if check.compiles else None
            todo.append(_Pair(target.ref, target.name, target.family, check.name, cases, pair_size, first))
            declared.append([k.describe() for k in target.known if check.name in k.checks])
            campaign.applicable[target.family] += 1
            campaign.applicable_checks[check.name] += 1
    scheduler = Scheduler(len(todo), seed=campaign.seed, rounds=rounds, known=declared)
    results: dict[int, PairResult] = {}
    opts = dict(
        config=config,
        timeout=timeout,
        database=None,
        database_url=database_url,
        sys_path=list(sys.path),
        opinfo=any(p.ref.startswith("opinfo/") for p in todo),
        device=device,
    )
    workers: Pool | None = None
    running: dict[int, _Running] = {}  # slot -> its batch
    retries: deque[_Retry] = deque()  # batches whose worker died, to run again elsewhere
    start: float | None = None
    end: float | None = None
    stopping = False

    def finish_cut(k: int) -> None:
        """Slot ``k``'s batch ends where it stands, as if cut by its deadline."""
        job = running[k]
        finish(
            k,
            PairResult(
                todo[job.index].name, todo[job.index].check, Tally(), cut=True, seconds=time.monotonic() - job.started
            ),
        )

    def finish(k: int, batch: PairResult, job: _Running | None = None) -> None:
        """Slot ``k``'s batch (or ``job``, run there last) has ended."""
        assert start is not None and workers is not None  # a batch of a busy slot, once the workers are up
        job = running.pop(k) if job is None else job
        pair = todo[job.index]
        batch.ref, batch.family = pair.ref, pair.family
        total = results.get(job.index)
        if total is None:
            total = results[job.index] = PairResult(pair.name, pair.check, Tally(), ref=pair.ref, family=pair.family)
            campaign.results.append(total)
        total.absorb(batch)
        total.crash_records.extend(batch.crash_records)
        if batch.disturbed:  # the pool replaces its worker (ForkPool, RayPool)
            campaign.replaced.append(f"{pair.key}: {batch.disturbed}")
        if total.found_at is None and (batch.ended or batch.known):
            total.found_at = time.monotonic() - start
        node = campaign.nodes[workers.node(k)]
        node.examples += batch.tally.examples
        node.batches += 1
        node.seconds += batch.seconds
        campaign.batches += 1
        scheduler.done(job.index, job.number, batch.report(), home=k)
        campaign.rounds = scheduler.round
        if on_batch:
            on_batch(campaign, total, batch)

    def died(event: Died) -> None:
        """A dead worker costs its batch: run again on another worker, or a crash."""
        assert workers is not None
        job = running.pop(event.slot)
        retry = _Retry(job, event, job.attempt + 1)
        if job.attempt < workers.retries and not stopping:
            retries.append(retry)
            campaign.retried.append(f"{todo[job.index].key}: the worker died ({event.cause}); its batch ran again")
        else:
            crash(retry)

    def crash(retry: _Retry) -> None:
        """The batch's case in flight is a crash: recorded, and the pair ends."""
        assert workers is not None
        job, event = retry.job, retry.event
        records = workers.record(event)
        again = f" (its batch had died {job.attempt} time(s) before, on another worker)" if job.attempt else ""
        finish(
            event.slot,
            PairResult(
                todo[job.index].name,
                todo[job.index].check,
                Tally(),
                crashed=True,
                error=f"the worker died ({event.cause}) running this pair" + again,
                seconds=time.monotonic() - job.started,
                crash_records=records,
            ),
            job,
        )

    def drop(retry: _Retry) -> None:
        """A batch that cannot run again: a crash if its worker died of it, else cut."""
        if retry.event.cause:
            crash(retry)
        else:
            index = retry.job.index
            cut = PairResult(todo[index].name, todo[index].check, Tally(), cut=True)
            finish(retry.event.slot, cut, retry.job)

    def next_job(k: int) -> tuple[int, int, int] | None:
        """(pair, batch, attempt): a batch to run again (not where it died,
        where another slot is free), else the scheduler's next."""
        for retry in retries:
            if retry.event.slot != k or not retry.event.cause or workers is None or workers.slots == 1:
                retries.remove(retry)
                return retry.job.index, retry.job.number, retry.attempt
        job = scheduler.take(home=k)
        return None if job is None else (*job, 0)

    try:
        workers = (pool or fork_pool)(opts, jobs, len(todo))
        campaign.jobs = max(1, workers.slots if pool else (jobs or os.cpu_count() or 1))
        for k in range(workers.slots):
            campaign.nodes[workers.node(k)].slots += 1
        # The budget is fuzzing time: it starts once the workers are up (the
        # forkserver's first start imports torch, seconds on a busy machine).
        start = time.monotonic()
        end = None if budget is None else start + budget
        hard_end = None if end is None or grace is None else end + grace  # grace is set whenever budget is
        while True:
            now = time.monotonic()
            stopping = stopping or (end is not None and now >= end)
            while retries and (stopping or not any(workers.usable(k) for k in range(workers.slots))):
                drop(retries.popleft())  # no batch starts after the budget, nor without a worker
            for k in range(workers.slots):
                if k in running or stopping or not workers.usable(k):
                    continue
                job = next_job(k)
                if job is None:
                    if on_start:
                        on_start(k, None, None)
                    continue
                index, number, attempt = job
                pair = todo[index]
                limits = [s for s in (batch_seconds, None if end is None else end - now) if s is not None]
                workers.start(
                    k,
                    Job(
                        (index, number),
                        pair.ref,
                        pair.check,
                        min(limits) if limits else None,
                        pair.cases,
                        batch_seed(campaign.seed, pair.key, number),
                        pair.size,
                        None if end is None else end - now,
                        pair.first_backends if number == 0 else None,
                    ),
                )
                running[k] = _Running(index, number, now, attempt)
                campaign.rounds = scheduler.round
                if on_start:
                    on_start(k, pair.name, pair.check)
            if not running:  # stopping, or no batch left: take() plans the next round once all are done
                break
            try:
                events = workers.wait(1.0)
            except ClusterLost as lost:
                campaign.lost = str(lost)
                for k in list(running):
                    finish_cut(k)
                while retries:
                    drop(retries.popleft())
                break
            for event in events:
                if isinstance(event, Done):
                    finish(event.slot, event.result)
                elif isinstance(event, Stopped):
                    finish_cut(event.slot)
                elif isinstance(event, Lost):  # again, anywhere, as the same attempt
                    again = running.pop(event.slot)
                    retries.append(_Retry(again, Died(event.slot, ""), again.attempt))
                else:
                    died(event)
            if hard_end is not None and time.monotonic() > hard_end:
                for k in list(running):
                    workers.kill(k)
                    finish_cut(k)
    finally:
        fuzzing = time.monotonic() - (start or time.monotonic())  # the workers' shutdown is not fuzzing time
        if workers is not None:
            workers.close()
    scheduler.settle()  # the batches of the last, maybe unfinished, round count too
    for index, total in results.items():
        total.scores = list(scheduler.pairs[index].scores)
    start = time.monotonic() if start is None else start
    if config.corpus is not None:
        campaign.recovered = recover(config.corpus, cause="a fuzzdiff run worker died")
        _attach(campaign, config.corpus, start)
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
