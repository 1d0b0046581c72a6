"""A campaign's batches on a Ray cluster: ``fuzzdiff run --ray [ADDRESS]``.

The campaign is the local one (fuzzdiff.campaign.run_campaign: its rounds,
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
crash record. That case is in the worker's journal (fuzzdiff.journal) on its
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
import logging
import os
import secrets
import shutil
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzzdiff.campaign import ClusterLost, Died, Done, Event, Job, PairResult, Stopped, run_batch, start_worker
from fuzzdiff.corpus import write_record
from fuzzdiff.fuzzing import Tally
from fuzzdiff.journal import Inflight, record_inflight, take

__all__ = ["ClusterError", "RayPool", "connected", "ray_pool", "INSTALL"]

INSTALL = "pip install 'fuzzdiff[cluster]'"
CONNECT_SECONDS = 5.0  # an address that does not answer in this long is a usage error, not a wait
READY_SECONDS = 600.0  # the workers' start (each imports torch) on a busy cluster


class ClusterError(RuntimeError):
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

    def __init__(self, opts: dict):
        self.opts = dict(opts)
        start_worker(self.opts)
        self.opts["journal"] = str(_journal_folder(opts["token"]))

    def ready(self) -> tuple[int, str, str]:
        """(pid, Ray node id, host name): where its journal is and who it is."""
        ray = _ray()
        return os.getpid(), ray.get_runtime_context().get_node_id(), socket.gethostname()

    def run(self, job: Job) -> PairResult:
        if self.opts["noop"]:  # the driver's own cost, measured (bench/cluster.py)
            return PairResult(job.target, job.check, Tally())
        return run_batch(job, self.opts)


def _take_inflight(folder: str, pid: int) -> list[Inflight]:
    """On a dead worker's node: its example in flight (a Ray task)."""
    return take(folder, pid)


def _clean(folder: str) -> None:
    """On a node, at the campaign's end: its workers' journal (a Ray task)."""
    shutil.rmtree(folder, ignore_errors=True)


@dataclass
class _Slot:
    actor: Any
    ready: Any  # the ref of its worker's (pid, node id, host)
    node_id: str
    label: str = ""  # the node, as reports name it
    job: Job | None = None
    batch: Any = None  # the ref of its batch in flight
    reading: Any = None  # the ref of a dead worker's example in flight, read on its node
    cause: str = ""  # how its last worker died
    retired: bool = False  # its node is gone, or the campaign killed its worker


class RayPool:
    """Worker actors on the Ray cluster this process is connected to: one per
    CPU (``jobs`` at most), or one per GPU when the cases ask for cuda."""

    retries = 1  # a worker's death may be its node's: the batch runs once more before its case is a crash

    def __init__(self, opts: dict, jobs: int | None, pairs: int, *, noop: bool = False):
        ray = self.ray = _ray()
        if not ray.is_initialized():
            raise ClusterError("RayPool needs a Ray connection: fuzzdiff.cluster.connected()")
        self.corpus = opts["corpus"]
        token = secrets.token_hex(6)
        self.folder = str(_journal_folder(token))
        # the workers never see the corpus: the driver writes every record
        self.opts = dict(opts, corpus=None, token=token, noop=noop)
        resources = ray.cluster_resources()
        gpu = str(opts.get("device") or "").startswith("cuda")
        have = int(resources.get("GPU" if gpu else "CPU", 0))
        if not have:
            raise ClusterError("--device cuda: the Ray cluster has no GPU" if gpu else "the Ray cluster has no CPU")
        self.per_worker: dict[str, Any] = {"num_cpus": 1, "num_gpus": 1} if gpu else {"num_cpus": 1}
        self.slots = max(0, min(have, jobs or have, pairs))
        self.cls = ray.remote(_Worker)
        self.workers: list[_Slot] = []
        for _ in range(self.slots):
            actor = self._actor()
            self.workers.append(_Slot(actor, actor.ready.remote(), ""))
        try:
            ready = ray.get([w.ready for w in self.workers], timeout=READY_SECONDS)
        except Exception as e:  # noqa: BLE001 - GetTimeoutError, an actor that failed to start, ...
            self.close()
            raise ClusterError(f"the Ray workers did not start: {e}") from None
        hosts: dict[str, set[str]] = {}
        for w, (_, node_id, host) in zip(self.workers, ready):
            w.node_id = node_id
            hosts.setdefault(host, set()).add(node_id)
        for w, (_, node_id, host) in zip(self.workers, ready):
            w.label = host if len(hosts[host]) == 1 else f"{host}/{node_id[:8]}"
        self._on_node = ray.remote(num_cpus=0, max_retries=0)

    def _actor(self, node_id: str | None = None) -> Any:
        options: dict[str, Any] = dict(self.per_worker, max_restarts=0, max_task_retries=0)
        if node_id is not None:
            options["scheduling_strategy"] = self._pinned(node_id)
        return self.cls.options(**options).remote(self.opts)

    def _pinned(self, node_id: str) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # optional, as in _ray()

        return NodeAffinitySchedulingStrategy(node_id, soft=False)

    def _node_alive(self, node_id: str) -> bool:
        return any(n.get("NodeID") == node_id and n.get("Alive") for n in self.ray.nodes())

    def start(self, k: int, job: Job) -> None:
        w = self.workers[k]
        w.job, w.batch = job, w.actor.run.remote(job)

    def wait(self, timeout: float) -> list[Event]:
        ray = self.ray
        refs = {}
        for k, w in enumerate(self.workers):
            for ref in (w.batch, w.reading):
                if ref is not None:
                    refs[ref] = k
        if not refs:
            return []
        try:
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=timeout)
            if ready:  # and whatever else has ended meanwhile
                ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        except Exception as e:  # noqa: BLE001 - the connection to the cluster is gone
            raise ClusterLost(f"lost the Ray cluster: {e}") from None
        events: list[Event] = []
        for ref in ready:
            k = refs[ref]
            w = self.workers[k]
            if ref is w.reading:
                w.reading = None
                try:
                    inflight = ray.get(ref)
                except ray.exceptions.RayError:
                    inflight = []  # the node went with it
                events.append(Died(k, w.cause, inflight))
                continue
            job, w.batch, w.job = w.job, None, None
            assert job is not None  # a batch in flight
            try:
                result = ray.get(ref)
            except ray.exceptions.RayActorError as e:
                event = self._died(k, e)
                if event is not None:
                    events.append(event)
            except ray.exceptions.TaskCancelledError:
                events.append(Stopped(k))
            except ray.exceptions.RayError as e:
                if not ray.is_initialized():
                    raise ClusterLost(f"lost the Ray cluster: {e}") from None
                message = str(e).strip().splitlines()
                events.append(Done(k, PairResult(job.target, job.check, Tally(), error=message[-1] if message else "")))
            else:
                self._write_failure(result)
                events.append(Done(k, result))
        return events

    def _write_failure(self, result: PairResult) -> None:
        """The driver writes the shrunk failure's record (deduplicated as always)."""
        found = result.failure
        if found is None or self.corpus is None:
            return
        path, created = write_record(self.corpus, found.check, found.case, found.verdict)
        found.record_path, found.record_created = str(path), created

    def _died(self, k: int, error: Exception) -> Died | None:
        """A worker is gone: a new one takes its slot, on the same node, and a
        task there reads the dead one's example in flight (None: the event
        comes once it has); a node that is gone retires the slot."""
        w = self.workers[k]
        w.cause = _cause(error)
        try:
            pid = self.ray.get(w.ready, timeout=0)[0]
        except Exception:  # noqa: BLE001 - it died before it was up: no example was in flight
            pid = None
        if not self._node_alive(w.node_id):
            w.retired = True
            w.cause += f"; its node {w.label} is gone"
            return Died(k, w.cause, [])
        w.actor = self._actor(w.node_id)
        w.ready = w.actor.ready.remote()
        if pid is None:
            return Died(k, w.cause, [])
        w.reading = (
            self._on_node(_take_inflight).options(scheduling_strategy=self._pinned(w.node_id)).remote(self.folder, pid)
        )
        return None

    def kill(self, k: int) -> None:
        w = self.workers[k]
        with contextlib.suppress(Exception):
            self.ray.kill(w.actor, no_restart=True)
        w.batch, w.job, w.retired = None, None, True

    def record(self, died: Died) -> list[str]:
        if self.corpus is None:
            return []
        where = self.workers[died.slot].label
        return [
            str(record_inflight(self.corpus, entry, cause=f"a fuzzdiff run worker on {where} died ({died.cause})"))
            for entry in died.inflight or []
        ]

    def usable(self, k: int) -> bool:
        return not self.workers[k].retired

    def node(self, k: int) -> str:
        return self.workers[k].label

    def close(self) -> None:
        """Stop the workers (an interrupted batch is not a crash: its journal
        goes with the rest) and remove their journals, node by node."""
        ray = self.ray
        nodes = {w.node_id for w in self.workers if w.node_id}
        for w in self.workers:
            with contextlib.suppress(Exception):
                ray.kill(w.actor, no_restart=True)
        with contextlib.suppress(Exception):
            cleaning = [
                self._on_node(_clean).options(scheduling_strategy=self._pinned(n)).remote(self.folder)
                for n in nodes
                if self._node_alive(n)
            ]
            ray.wait(cleaning, num_returns=len(cleaning), timeout=10)


def _cause(error: Exception) -> str:
    """How a worker died, in a line, from Ray's account of it."""
    text = str(error)
    for marker in ("Worker exit detail:", "The actor is dead because"):
        at = text.find(marker)
        if at >= 0:
            return " ".join(text[at:].split())[:300]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[0] if lines else type(error).__name__)[:300]


def ray_pool(*, noop: bool = False) -> Any:
    """``run_campaign``'s ``pool=``: the workers on the connected Ray cluster."""

    def make(opts: dict, jobs: int | None, pairs: int) -> RayPool:
        return RayPool(opts, jobs, pairs, noop=noop)

    return make
