"""What runs in a worker process: one batch of one (target, check) pair.

A batch (``Job``) is plain data, to a process or a machine: a pair, a seed,
a size (``BatchSize``) and a deadline. ``start_worker`` makes a process a
worker once, before its first batch, from the campaign's ``WorkerSetup``
(frozen plain data: it pickles alike to a forked process and to a Ray actor,
and no worker changes what it was told); ``run_batch`` runs one and returns its
``PairResult``, whatever happened: a failure shrunk, a framework error, a
batch cut by its deadline. The process is the pool's (fuzzdiff.campaign.pool's forked
processes, fuzzdiff.campaign.cluster's Ray actors); ``serve`` is a local worker's loop.

A running batch stops at its own deadline with what it has tallied, unless it
has found a failure: that is still shrunk (only the campaign's hard stop ends
that). What a batch leaves behind in torch's state is put back after it, and
what cannot be is said (``PairResult.disturbed``): the pool then replaces the
worker.
"""

from __future__ import annotations

import resource
import signal
import sys
import time
import warnings
from dataclasses import dataclass, replace

import torch
from hypothesis import HealthCheck, Phase, Verbosity
from hypothesis import settings as hsettings
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.database import ExampleDatabase

from fuzzdiff.campaign.database import example_database
from fuzzdiff.campaign.results import Found, PairResult
from fuzzdiff.case.case import Case
from fuzzdiff.checks import Check, get_check
from fuzzdiff.config import FuzzConfig
from fuzzdiff.errors import FuzzdiffInterrupt
from fuzzdiff.guards import torch_state
from fuzzdiff.guards.unsupported import unsupported_reason
from fuzzdiff.paths.vmap import stop_recording_fallbacks
from fuzzdiff.search.fresh import FreshProcess
from fuzzdiff.search.fuzzing import FuzzFailure, Search, Tally, fuzz, settle_heap
from fuzzdiff.targets import get_target
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict

__all__ = ["BatchSize", "Job", "WorkerSetup", "run_batch", "serve", "start_worker"]


@dataclass(frozen=True)
class BatchSize:
    """One batch: ``examples`` Hypothesis examples, each of the campaign's
    ``FuzzConfig.structures`` drawn cases run at its ``variants``
    value-and-probe seeds (fuzzdiff.search.fuzzing.fuzz).

    ``for_pair`` narrows it to ``examples // NARROW`` (at least 2, at most
    ``examples``) where more examples buy little: a target whose spec fixes
    every size (an OpInfo sample) has few distinct structures, and a check
    that compiles pays seconds per example for what an eager check gets in
    milliseconds.
    """

    examples: int = 48

    def __post_init__(self):
        if self.examples < 1:
            raise ValueError(f"a batch's examples must be at least 1, got {self.examples}")

    def for_pair(self, target: Target, check: Check) -> BatchSize:
        fixed = all(d.kind == "fixed" for a in target.args for d in a.dims)
        if fixed or check.compiles:
            return replace(self, examples=min(self.examples, max(2, self.examples // NARROW)))
        return self


NARROW = 8


class _Stop(FuzzdiffInterrupt):
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
    tour: tuple[str, ...] = ()  # the layout classes each example meets (fuzzdiff.search.layout_tour), in order
    tour_cases: int | None = None  # of those that apply, at most this many (None: all)
    autograd_backends: tuple[str, ...] | None = None  # compiled autograd's backends, likewise


@dataclass(frozen=True)
class WorkerSetup:
    """What every worker of a campaign is told once, before its first batch.

    ``config`` is the campaign's FuzzConfig, as its driver resolved it (a
    worker reads no environment variable); ``sys_path`` the driver's, where
    user targets are imported from; ``opinfo`` says whether OpInfo's targets
    are fuzzed (their database is imported once, before the budget starts);
    ``isolate=False`` does without the process that reruns failures afresh.
    ``token`` and ``noop`` are a Ray pool's (fuzzdiff.campaign.cluster): its
    workers' journal folder, and workers that run nothing (bench/cluster.py).
    """

    config: FuzzConfig
    sys_path: tuple[str, ...] = ()
    opinfo: bool = False
    isolate: bool = True
    token: str | None = None
    noop: bool = False


def run_batch(job: Job, setup: WorkerSetup, database: ExampleDatabase | None = None) -> PairResult:
    """Run one batch in a worker made by ``start_worker(setup)``, with the
    example ``database`` it opened."""
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
            database=database,
            print_blob=False,
            verbosity=Verbosity.quiet,
            suppress_health_check=list(HealthCheck),
            phases=[p for p in Phase if p != Phase.explain],
        )
        config = replace(
            setup.config,
            seed=job.seed,
            recover_crashes=False,  # the campaign's parent records a dead worker's case, with how it died
            case_options={**setup.config.case_options, **job.cases},
            compile_backends=job.backends or setup.config.compile_backends,
            compiled_autograd_backends=job.autograd_backends or setup.config.compiled_autograd_backends,
        )
        result.tally = fuzz(
            clock.wrap(check),
            target,
            config,
            settings=settings,
            search=Search(fresh=_fresh_process(setup), tour=job.tour, tour_cases=job.tour_cases),
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
    result.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    return result


_FRESH: list[FreshProcess] = []  # the worker's own rerunning process, once it has one


def _fresh_process(setup: WorkerSetup) -> FreshProcess | None:
    """The worker's process that reruns its failures afresh (fuzzdiff.search.fresh),
    started on its first failure; None where the campaign does without."""
    if not setup.isolate:
        return None
    if not _FRESH:
        _FRESH.append(FreshProcess())
    return _FRESH[0]


def start_worker(setup: WorkerSetup) -> ExampleDatabase | None:
    """Make this process a campaign worker, once, before its first batch; the
    example database its batches share (None: the campaign keeps none)."""
    # A worker starts with the parent's sys.path and environment of some earlier
    # moment (the forkserver's start, a cluster node's): its sys.path is brought
    # up to date (user targets are imported from there), its environment never.
    # Its settings came resolved, in setup.config: fuzz() reads no variable,
    # and of Hypothesis's, what a worker needs is where its storage is (the
    # constants it caches, the example database): the driver's, said here.
    sys.path[:0] = [p for p in setup.sys_path if p not in sys.path]
    config = setup.config
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
    if config.database_url is None:
        return None
    return example_database(config.database_url or None, local=config.example_dir)


def serve(conn, setup: WorkerSetup) -> None:
    """A local worker process (fuzzdiff.campaign.pool.ForkPool): run the batches the
    parent sends on ``conn``, one at a time, until it sends None."""
    database = start_worker(setup)
    while True:
        try:
            job = conn.recv()
        except EOFError:
            break
        if job is None:
            break
        conn.send((job.key, run_batch(job, setup, database)))
    for fresh in _FRESH:
        fresh.close()
