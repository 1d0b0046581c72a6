"""Where a campaign's batches run: a ``Pool``, and ``ForkPool``, this machine's processes.

A pool has a small interface: start a batch on a slot; wait for batches
done, workers dead or stopped (the ``Event`` types). The campaign's loop
(fuzzdiff.campaign.loop) owns the scheduling, the budget and the results; a pool
only runs batches and says how they ended. fuzzdiff.campaign.cluster's ``RayPool`` is
the other one, on a Ray cluster.

Each local worker is forked from a forkserver that imported torch and
fuzzdiff once (forking the parent itself, which may hold torch threads, is
what does not mix; spawning would import torch once per worker), so a case
that kills its process costs one batch, not the campaign: a fresh worker
takes the slot's next batch, and ``fuzzdiff.record.journal.recover`` turns the dead
worker's in-flight example into a ``crash`` record.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, Protocol

import torch

from fuzzdiff.campaign.results import PairResult
from fuzzdiff.campaign.worker import Job, WorkerSetup, serve
from fuzzdiff.errors import FuzzdiffError
from fuzzdiff.record.journal import STOPS, forget, recover

__all__ = [
    "ClusterLost",
    "Died",
    "Done",
    "Event",
    "ForkPool",
    "Lost",
    "Pool",
    "PoolFactory",
    "Stopped",
    "fork_pool",
    "preload",
]


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
    batch of the same call (fuzzdiff.campaign.cluster): it runs again, not a crash."""

    slot: int


@dataclass
class Stopped:
    """Slot ``slot``'s worker was told to stop (a signal): its batch was interrupted, not crashed."""

    slot: int


Event = Done | Died | Lost | Stopped


class Pool(Protocol):
    """The workers a campaign runs its batches on: ``slots`` of them, each
    running one batch at a time. The campaign's loop (fuzzdiff.campaign.loop) owns
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
        (or none, where the campaign finds them at its end)."""
        ...

    def usable(self, k: int) -> bool:
        """Whether slot ``k`` can take a batch (a slot whose machine is gone cannot)."""
        ...

    def node(self, k: int) -> str:
        """The machine slot ``k`` runs on."""
        ...

    def close(self) -> None: ...


class ClusterLost(FuzzdiffError, RuntimeError):
    """The pool's workers are gone (a cluster that disappeared): the campaign
    ends with the results so far."""


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

    def __init__(self, setup: WorkerSetup, slots: int, preload: Sequence[str]):
        self.setup, self.slots = setup, slots
        self.corpus = setup.config.corpus
        self.ctx = mp.get_context("forkserver")
        self.ctx.set_forkserver_preload(list(preload))
        self.replaced = 0  # workers replaced because something disturbed their process
        self.workers: list[_Process] = []
        for _ in range(slots):
            self.workers.append(self._spawn())

    def _spawn(self) -> _Process:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=serve, args=(child, self.setup), daemon=True)
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

PoolFactory = Callable[[WorkerSetup, "int | None", int], Pool]


def preload(setup: WorkerSetup) -> list[str]:
    """What a worker imports before its first batch, once, in the forkserver:
    the module it runs (``serve``'s, and through it torch, the checks and the
    paths) and the targets'. Not torch's OpInfo database where a GPU is visible: importing it asks the
    device's capability, which initializes CUDA in the forkserver, and no
    process forked from there can use CUDA again ("Cannot re-initialize CUDA in
    forked subprocess"); each worker imports it for itself then."""
    modules = [serve.__module__, "fuzzdiff.targets.catalog"]
    if setup.opinfo and not torch.cuda.is_available():
        modules.append("torch.testing._internal.common_methods_invocations")  # op_db: seconds, once
    return modules


def fork_pool(setup: WorkerSetup, jobs: int | None, pairs: int) -> ForkPool:
    """The local pool: ``jobs`` workers (default: every core), no more than pairs."""
    return ForkPool(setup, min(jobs or os.cpu_count() or 1, pairs), preload(setup))
