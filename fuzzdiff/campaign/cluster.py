"""A campaign's batches on a Ray cluster: ``fuzzdiff run --ray [ADDRESS]``.

The campaign is the local one (fuzzdiff.campaign.loop.run_campaign: its rounds,
budget, grace and results); only where batches run changes. ``RayPool`` keeps
one long-lived worker actor per CPU of the cluster (per GPU when the
campaign's cases ask for cuda), each importing torch once, and runs one batch
per actor call.

The driver owns the results: a worker runs ``fuzz()`` without a corpus and
returns its tally and shrunk failure as data, and the driver writes the
records, so no node needs the corpus or a shared filesystem. The Hypothesis
example database is shared, where wanted, through Redis (``--db``).

A worker that dies costs its batch, which runs once more on another worker
(the same seed draws the same cases); dying again, its case in flight is a
crash record. That case is in the worker's journal (fuzzdiff.record.journal) on its
own node's disk, written as in a local campaign (once per drawn case, the
variant through a memory map: nothing crosses the network per example); after
a death a small task on that node reads it and sends it to the driver. A node
that is gone takes its slots and their journals with it; a cluster that is
gone ends the campaign with the results so far.

``ray`` is an optional dependency (the "cluster" extra): it is imported inside
the functions here, only when ``--ray`` is given.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fuzzdiff.campaign.pool import ClusterLost, Died, Done, Event, Lost, Stopped, preload
from fuzzdiff.campaign.results import PairResult
from fuzzdiff.campaign.worker import Job, WorkerSetup, run_batch, start_worker
from fuzzdiff.errors import FuzzdiffError
from fuzzdiff.record.files import write_record
from fuzzdiff.record.journal import Inflight, record_inflight, take
from fuzzdiff.search.fuzzing import Tally

__all__ = ["ClusterError", "RayPool", "connected", "preflight", "ray_pool", "INSTALL"]

INSTALL = "pip install 'fuzzdiff[cluster]'"
CONNECT_SECONDS = 5.0  # an address that does not answer in this long is a usage error, not a wait
READY_SECONDS = 600.0  # the workers' start (each imports torch) on a busy cluster
CALL_WORKERS = 512  # workers one batch per actor call serves (bench/cluster.py: ~0.6 ms of the driver per call)


class ClusterError(FuzzdiffError, RuntimeError):
    """``--ray`` cannot run: ray is not installed, the cluster cannot be reached,
    or it lacks what the campaign needs (a usage error: exit status 2)."""


def _ray() -> Any:
    try:
        import ray  # optional (the "cluster" extra): only --ray needs it
    except ImportError:
        raise ClusterError(f"--ray needs the 'ray' package, which is not installed: {INSTALL}") from None
    return ray


def _reachable(address: str) -> None:
    """Fail fast on a HOST:PORT nobody listens on: ray.init would retry for
    over a minute, then end the process."""
    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return  # "auto", ray://...: Ray's own lookup
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_SECONDS).close()
    except OSError as e:
        raise ClusterError(f"--ray {address}: no Ray cluster answers there ({e})") from None


def preflight(address: str | None) -> None:
    """What ``connected`` would fail on, said at once: ray not installed, or
    nothing answering at ``address``."""
    _ray()
    if address:
        _reachable(address)


@contextlib.contextmanager
def connected(address: str | None, cpus: int | None = None) -> Iterator[None]:
    """Ray, for the block: the cluster at ``address``, or else a local instance
    of ``cpus`` CPUs (default: every core), shut down after. A Ray already
    initialized (by a caller, a test) is used as it is."""
    ray = _ray()
    if address:
        _reachable(address)
    if ray.is_initialized():
        yield
        return
    # Ray's own logs would tear the live display: errors only, and the workers' output stays on the nodes.
    quiet: dict[str, Any] = dict(log_to_driver=False, logging_level=logging.ERROR)
    try:
        if address:
            ray.init(address=address, **quiet)
        else:
            ray.init(num_cpus=cpus or os.cpu_count() or 1, include_dashboard=False, **quiet)
    except ClusterError:
        raise
    except (Exception, SystemExit) as e:  # noqa: BLE001 - ray.init raises many kinds, and exits on a lost GCS
        raise ClusterError(f"--ray {address or '(a local instance)'}: Ray did not start: {e}") from None
    try:
        yield
    finally:
        ray.shutdown()


def _journal_folder(token: str) -> Path:
    """The node-local journal of one campaign's workers."""
    return Path(tempfile.gettempdir()) / f"fuzzdiff-ray-{token}"


class _Worker:
    """A campaign worker on a Ray node: a process of fuzzdiff's own, which
    imports torch once and runs the batches sent to it."""

    def __init__(self, setup: WorkerSetup):
        assert setup.token is not None  # RayPool's
        self.journal = _journal_folder(setup.token)
        # journaled on this node's disk, where the driver reads a dead worker's case
        self.setup = replace(setup, config=replace(setup.config, journal_dir=self.journal))
        self.database = start_worker(self.setup)
        for module in preload(setup):  # before the budget starts, as the forkserver does
            importlib.import_module(module)

    def ready(self) -> tuple[int, str, str]:
        """(pid, Ray node id, host name): where its journal is and who it is."""
        ray = _ray()
        return os.getpid(), ray.get_runtime_context().get_node_id(), socket.gethostname()

    def clean(self) -> None:
        """Remove this node's journal of the campaign, at its end."""
        shutil.rmtree(self.journal, ignore_errors=True)

    def run(self, jobs: list[Job]) -> list[PairResult]:
        """Run the batches one after the other, each within what is left of the
        budget (``Job.until``, counted from this call's arrival)."""
        arrived = time.monotonic()
        results = []
        for job in jobs:
            if self.setup.noop:  # the driver's own cost, measured (bench/cluster.py)
                results.append(PairResult(job.target, job.check, Tally()))
                continue
            if job.until is not None:
                left = job.until - (time.monotonic() - arrived)
                if left <= 0:  # the budget ended before this batch could start
                    results.append(PairResult(job.target, job.check, Tally(), cut=True))
                    continue
                job = replace(job, deadline=left if job.deadline is None else min(job.deadline, left))
            results.append(run_batch(job, self.setup, self.database))
        return results


@dataclass
class _Actor:
    handle: Any
    ready: Any  # the ref of its worker's (pid, node id, host)
    node_id: str = ""
    label: str = ""  # the node, as reports name it
    retired: bool = False  # its node is gone, or the campaign killed its worker


@dataclass
class _Call:
    """One actor call: the batches of some of the actor's slots."""

    actor: int
    jobs: list[tuple[int, Job]]  # (slot, batch)
    cause: str = ""  # how the actor died running it


class RayPool:
    """Worker actors on the Ray cluster this process is connected to: one per
    CPU (``jobs`` at most), or one per GPU when the cases ask for cuda.

    ``per_call`` slots share an actor, and the batches started on them
    together travel in one actor call and run one after the other: an actor
    call costs the driver about half a millisecond, which a batch of a
    second does not notice and a no-op batch does (bench/cluster.py). By
    default one, and more beyond CALL_WORKERS workers."""

    retries = 1  # a worker's death may be its node's: the batch runs once more before its case is a crash

    def __init__(
        self, setup: WorkerSetup, jobs: int | None, pairs: int, *, per_call: int | None = None, noop: bool = False
    ):
        ray = self.ray = _ray()
        if not ray.is_initialized():
            raise ClusterError("RayPool needs a Ray connection: fuzzdiff.campaign.cluster.connected()")
        if per_call is not None and per_call < 1:
            raise ValueError(f"per_call must be at least 1, got {per_call}")
        config = setup.config
        self.corpus = config.corpus
        token = secrets.token_hex(6)
        self.folder = str(_journal_folder(token))
        # The workers get the campaign's settings as the driver resolved them (a
        # node's environment is its own), but never the corpus: the driver writes every record.
        self.setup = replace(setup, config=replace(config, corpus=None), token=token, noop=noop)
        resources = ray.cluster_resources()
        gpu = str(config.device or "").startswith("cuda")
        have = int(resources.get("GPU" if gpu else "CPU", 0))
        if not have:
            raise ClusterError("--device cuda: the Ray cluster has no GPU" if gpu else "the Ray cluster has no CPU")
        self.per_worker: dict[str, Any] = {"num_cpus": 1, "num_gpus": 1} if gpu else {"num_cpus": 1}
        if noop:  # workers that take no core: as many as asked, to load the driver alone
            have, self.per_worker = jobs or have, {"num_cpus": 0}
        # One batch per call up to CALL_WORKERS workers; beyond, enough per call
        # that the driver sends no more calls than for CALL_WORKERS.
        per_call = per_call or max(1, -(-min(have, jobs or have) // CALL_WORKERS))
        actors = max(0, min(have, jobs or have, -(-pairs // per_call)))
        self.per_call, self.slots = per_call, actors * per_call
        self.cls = ray.remote(_Worker)
        self.actors: list[_Actor] = []
        for _ in range(actors):
            handle = self._actor()
            self.actors.append(_Actor(handle, handle.ready.remote()))
        try:
            ready = ray.get([a.ready for a in self.actors], timeout=READY_SECONDS)
        except Exception as e:  # noqa: BLE001 - GetTimeoutError, an actor that failed to start, ...
            self.close()
            raise ClusterError(f"the Ray workers did not start: {e}") from None
        hosts: dict[str, set[str]] = {}
        for a, (_, node_id, host) in zip(self.actors, ready):
            a.node_id = node_id
            hosts.setdefault(host, set()).add(node_id)
        for a, (_, node_id, host) in zip(self.actors, ready):
            a.label = host if len(hosts[host]) == 1 else f"{host}/{node_id[:8]}"
        self._on_node = ray.remote(num_cpus=0, max_retries=0)
        self.pending: dict[int, list[tuple[int, Job]]] = {}  # actor -> batches started, not yet sent
        self.calls: dict[Any, _Call] = {}  # ref of its results -> the call
        self.reading: dict[Any, _Call] = {}  # ref of a dead actor's example in flight -> the call it killed

    def _actor(self, node_id: str | None = None) -> Any:
        options: dict[str, Any] = dict(self.per_worker, max_restarts=0, max_task_retries=0)
        if node_id is not None:
            options["scheduling_strategy"] = self._pinned(node_id)
        return self.cls.options(**options).remote(self.setup)

    def _pinned(self, node_id: str) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # optional, as in _ray()

        return NodeAffinitySchedulingStrategy(node_id, soft=False)

    def _node_alive(self, node_id: str) -> bool:
        return any(n.get("NodeID") == node_id and n.get("Alive") for n in self.ray.nodes())

    def start(self, k: int, job: Job) -> None:
        self.pending.setdefault(k // self.per_call, []).append((k, job))  # sent by wait()

    def _send(self) -> None:
        for a, jobs in self.pending.items():
            ref = self.actors[a].handle.run.remote([job for _, job in jobs])
            self.calls[ref] = _Call(a, jobs)
        self.pending.clear()

    def wait(self, timeout: float) -> list[Event]:
        ray = self.ray
        if not ray.is_initialized():  # and never a call that would start a new local instance
            raise ClusterLost("lost the Ray cluster: the connection to it was shut down")
        try:
            self._send()
        except Exception as e:  # noqa: BLE001 - the actors' cluster is not there any more
            raise ClusterLost(f"lost the Ray cluster: {e}") from None
        refs = [*self.calls, *self.reading]
        if not refs:
            return []
        try:  # what has ended already, else the first to end
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            if not ready:
                ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        except Exception as e:  # noqa: BLE001 - the connection to the cluster is gone
            raise ClusterLost(f"lost the Ray cluster: {e}") from None
        values = self._get(ready)
        events: list[Event] = []
        for ref in ready:
            if ref in self.reading:
                call = self.reading.pop(ref)
                try:
                    inflight = values[ref] if ref in values else ray.get(ref)
                except ray.exceptions.RayError:
                    inflight = []  # the node went with it
                events.extend(self._lost(call, inflight))
                continue
            call = self.calls.pop(ref)
            try:
                results = values[ref] if ref in values else ray.get(ref)
            except ray.exceptions.RayActorError as e:
                events.extend(self._died(ref, call, e))
            except ray.exceptions.TaskCancelledError:
                events.extend(Stopped(k) for k, _ in call.jobs)
            except ray.exceptions.RayError as e:
                if not ray.is_initialized():
                    raise ClusterLost(f"lost the Ray cluster: {e}") from None
                lines = str(e).strip().splitlines()
                for k, job in call.jobs:
                    events.append(Done(k, PairResult(job.target, job.check, Tally(), error=lines[-1] if lines else "")))
            else:
                for (k, _), result in zip(call.jobs, results):
                    self._write_failure(result)
                    events.append(Done(k, result))
                if any(r.disturbed for r in results):
                    self._replace(call.actor)
        return events

    def _replace(self, index: int) -> None:
        """An actor whose process something disturbed (fuzzdiff.guards.torch_state),
        idle now that its call is done: a fresh one takes its slots, on its node."""
        a = self.actors[index]
        if a.retired:
            return
        with contextlib.suppress(Exception):
            self.ray.kill(a.handle, no_restart=True)
        a.handle = self._actor(a.node_id)
        a.ready = a.handle.ready.remote()

    def _get(self, refs: list) -> dict:
        """The values of ``refs`` in one call where none failed (else none: each is
        fetched alone, and the failures said one by one)."""
        try:
            return dict(zip(refs, self.ray.get(refs)))
        except Exception:  # noqa: BLE001 - a dead worker's, or a read's: see wait()
            return {}

    def _write_failure(self, result: PairResult) -> None:
        """The driver writes the shrunk failure's record (deduplicated as always)."""
        found = result.failure
        if found is None or self.corpus is None:
            return
        path, created = write_record(self.corpus, found.check, found.case, found.verdict, blame=found.blame)
        found.record_path, found.record_created = str(path), created

    def _died(self, ref: Any, call: _Call, error: Exception) -> list[Event]:
        """An actor is gone: a new one takes its slots, on the same node, and a
        task there reads the dead one's example in flight (the events come once
        it has); a node that is gone retires its slots."""
        a = self.actors[call.actor]
        call.cause = _cause(error)
        try:
            pid = self.ray.get(a.ready, timeout=0)[0]
        except Exception:  # noqa: BLE001 - it died before it was up: no example was in flight
            pid = None
        if not self._node_alive(a.node_id):
            a.retired = True
            call.cause += f"; its node {a.label} is gone"
            return self._lost(call, [])
        if not a.retired:  # a second call to the same dead actor finds it replaced already
            a.handle = self._actor(a.node_id)
            a.ready = a.handle.ready.remote()
        if pid is None:
            return self._lost(call, [])
        # journal.take, by reference: the task imports fuzzdiff.record.journal alone, not torch
        read = self._on_node(take).options(scheduling_strategy=self._pinned(a.node_id))
        self.reading[read.remote(self.folder, pid)] = call
        return []

    def _lost(self, call: _Call, inflight: list[Inflight]) -> list[Event]:
        """A dead actor's call: the batch whose example was in flight died with
        it; the others of the call, done or not begun, ran into no fault of
        their own. Without a known example in flight, every batch died."""
        culprit = None
        for entry in inflight:
            case = entry.info.get("case") or {}
            culprit = next(
                (
                    k
                    for k, job in call.jobs
                    if job.check == entry.info.get("check") and job.target == case.get("target")
                ),
                culprit,
            )
        if culprit is None:
            return [Died(k, call.cause, inflight) for k, _ in call.jobs]
        return [Died(k, call.cause, inflight) if k == culprit else Lost(k) for k, _ in call.jobs]

    def kill(self, k: int) -> None:
        a = self.actors[k // self.per_call]
        with contextlib.suppress(Exception):
            self.ray.kill(a.handle, no_restart=True)
        a.retired = True
        for ref, call in list(self.calls.items()):
            call.jobs = [(s, job) for s, job in call.jobs if s != k]
            if not call.jobs:
                del self.calls[ref]

    def record(self, died: Died) -> list[str]:
        if self.corpus is None:
            return []
        where = self.actors[died.slot // self.per_call].label
        return [
            str(record_inflight(self.corpus, entry, cause=f"a fuzzdiff run worker on {where} died ({died.cause})"))
            for entry in died.inflight or []
        ]

    def usable(self, k: int) -> bool:
        return not self.actors[k // self.per_call].retired

    def node(self, k: int) -> str:
        return self.actors[k // self.per_call].label

    def close(self) -> None:
        """Stop the workers (an interrupted batch is not a crash: its journal
        goes with the rest) and remove their journals, node by node: by an
        idle worker of the node (a warm process), else by a task there."""
        ray = self.ray
        if not ray.is_initialized():
            return  # gone with the connection
        busy = {call.actor for call in self.calls.values()}
        for index in busy:
            with contextlib.suppress(Exception):
                ray.kill(self.actors[index].handle, no_restart=True)
        with contextlib.suppress(Exception):  # their deaths, before their journals go
            ray.wait(list(self.calls), num_returns=len(self.calls), timeout=5)
        cleaners: dict[str, Any] = {}
        for index, actor in enumerate(self.actors):
            if index not in busy and not actor.retired and actor.node_id:
                cleaners.setdefault(actor.node_id, actor.handle)
        with contextlib.suppress(Exception):
            cleaning = [handle.clean.remote() for handle in cleaners.values()]
            for node_id in {actor.node_id for actor in self.actors if actor.node_id} - set(cleaners):
                if self._node_alive(node_id):
                    task = self._on_node(shutil.rmtree).options(scheduling_strategy=self._pinned(node_id))
                    cleaning.append(task.remote(self.folder, True))
            ray.wait(cleaning, num_returns=len(cleaning), timeout=10)
        for index, actor in enumerate(self.actors):
            if index not in busy:
                with contextlib.suppress(Exception):
                    ray.kill(actor.handle, no_restart=True)


def _cause(error: Exception) -> str:
    """How a worker died, in a line, from Ray's account of it (the process's
    own exit status stays with the node: Ray reports a lost connection)."""
    text = " ".join(str(error).split())
    for marker in ("Worker exit detail:", "The actor is dead because"):
        at = text.find(marker)
        if at >= 0:
            detail = text[at + len(marker) if marker.endswith(":") else at :]
            return "Ray: " + detail.split(" Some common causes")[0].strip()[:200]
    return (text or type(error).__name__)[:200]


def ray_pool(*, per_call: int | None = None, noop: bool = False) -> Any:
    """``run_campaign``'s ``pool=``: the workers on the connected Ray cluster."""

    def make(setup: WorkerSetup, jobs: int | None, pairs: int) -> RayPool:
        return RayPool(setup, jobs, pairs, per_call=per_call, noop=noop)

    return make
