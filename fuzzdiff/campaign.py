"""A campaign: fuzz many (target, check) pairs within a time budget, on all cores.

What ``fuzzdiff run`` drives. Each pair runs in a worker process, forked
from a forkserver that imported torch and fuzzdiff once (forking the parent
itself, which may hold torch threads, is what does not mix; spawning would
import torch once per worker), so a case that kills its process costs one pair,
not the campaign: the pair is reported as a crash, a fresh worker takes the
next pair, and ``fuzzdiff.journal.recover`` turns the dead worker's in-flight
example into a ``crash`` record at the end. Workers stream each PairResult
back as it ends (live progress); every verdict is tallied per check, and each
failure keeps its shrunk case and corpus record.

Time: no pair starts after the budget. A running pair stops at its own
deadline (``pair_seconds``, and the budget's end) with what it has tallied,
unless it has found a failure: that is still shrunk; a worker still busy ``grace`` seconds
after the budget is killed and its pair reported as cut.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch
from hypothesis import HealthCheck, Phase, Verbosity, settings as hsettings

from fuzzdiff.case import Case
from fuzzdiff.checks import Check
from fuzzdiff.fuzzing import FuzzFailure, Tally
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict

__all__ = ["Campaign", "PairResult", "Found", "run_campaign", "case_options", "interleave"]


@dataclass
class Found:
    """A shrunk failure, as plain data (a FuzzFailure does not survive pickling)."""

    check: str
    target: str
    case: Case
    verdict: Verdict
    record_path: str | None = None
    record_created: bool = False


@dataclass
class PairResult:
    target: str
    check: str
    tally: Tally
    failure: Found | None = None
    error: str | None = None     # a framework error, or the worker died (crashed=True)
    crashed: bool = False
    cut: bool = False            # stopped by a deadline before its examples were all run
    known: bool = False          # the failure is the target's known discrepancy for this check
    seconds: float = 0.0
    crash_records: list[str] = field(default_factory=list)
    ref: str = ""                # what cases call the target (its corpus folder)

    @property
    def failed(self) -> bool:
        """A new finding: a known discrepancy (Target.known, an xfail in the
        pytest suite) is not, but a crash always is."""
        return (self.failure is not None and not self.known) or self.error is not None

    @property
    def new_records(self) -> int:
        created = self.failure is not None and self.failure.record_created
        return int(created) + len(self.crash_records)


@dataclass
class Campaign:
    results: list[PairResult] = field(default_factory=list)
    skipped_for_budget: int = 0
    recovered: list[Path] = field(default_factory=list)  # crash records written at the end
    seconds: float = 0.0
    jobs: int = 1

    def per_check(self) -> dict[str, Counter]:
        """Per check: pairs, verdicts (examples are their sum), crashes and new records."""
        table: dict[str, Counter] = defaultdict(Counter)
        for r in self.results:
            row = table[r.check]
            row.update(r.tally.counts)
            row["examples"] += r.tally.examples
            row["targets"] += 1
            row["crashed"] += r.error is not None
            row["known"] += r.known
            row["new records"] += r.new_records
        return dict(table)

    @property
    def failures(self) -> list[PairResult]:
        return [r for r in self.results if r.failed]


def case_options(target: Target, check: Check, dtypes: Sequence[torch.dtype] | None = None,
                 device: str | None = None) -> dict | None:
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


def interleave(pairs: Iterable[tuple[Target, Check]]) -> list[tuple[Target, Check]]:
    """Round-robin over checks, so that a budget cut short still covers every
    check rather than the first one's whole catalog."""
    by_check: dict[str, deque] = defaultdict(deque)
    for target, check in pairs:
        by_check[check.name].append((target, check))
    out = []
    while by_check:
        for name in list(by_check):
            out.append(by_check[name].popleft())
            if not by_check[name]:
                del by_check[name]
    return out


# -- the worker side ----------------------------------------------------------------------

class _Stop(BaseException):
    """Ends a pair's Hypothesis run at its deadline (not an Exception: nothing catches it)."""


class _Deadline:
    """Stops a pair at its deadline, keeping its tally: the check's verdicts are
    mirrored here (fuzz() keeps its own tally to itself), exactly so while the
    deadline is armed. Disarmed by the first failure or error, so that
    shrinking it is not cut short (only the campaign's hard stop ends that)."""

    def __init__(self, seconds: float | None):
        self.at = None if seconds is None else time.monotonic() + seconds
        self.tally = Tally()

    def wrap(self, check: Check) -> Check:
        from fuzzdiff.unsupported import unsupported_reason
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


def _run_pair(target_ref: str, check_name: str, deadline: float | None, opts: dict,
              cases: dict) -> PairResult:
    from fuzzdiff.checks import get_check
    from fuzzdiff.fuzzing import fuzz
    from fuzzdiff.targets import get_target

    t0 = time.monotonic()
    result = PairResult(target_ref, check_name, Tally(), ref=target_ref)
    clock = _Deadline(deadline)
    try:
        target, check = get_target(target_ref), get_check(check_name)
        result.target = target.name
        settings = hsettings(max_examples=opts["max_examples"], deadline=None, database=None,
                             print_blob=False, verbosity=Verbosity.quiet,
                             suppress_health_check=list(HealthCheck),
                             phases=[p for p in Phase if p != Phase.explain])
        result.tally = fuzz(clock.wrap(check), target, settings=settings, seed=opts["seed"],
                            corpus=opts["corpus"], variants=opts["variants"], timeout=opts["timeout"],
                            **cases)
    except _Stop:
        result.tally, result.cut = clock.tally, True
    except FuzzFailure as failure:
        result.failure = Found(failure.check, failure.target, failure.case, failure.verdict,
                               None if failure.record_path is None else str(failure.record_path),
                               failure.record_created)
        result.tally = failure.tally or result.tally
    except Exception as e:  # noqa: BLE001 - a framework error must not end the campaign
        result.error = f"{type(e).__name__}: {e}"
    result.seconds = time.monotonic() - t0
    return result


def _worker(conn, opts: dict) -> None:
    """Run the pairs the parent sends, one at a time, until it sends None."""
    import sys
    import warnings
    # The forkserver started with the parent's sys.path and environment of that
    # moment: bring both up to date (user targets are imported from there).
    sys.path[:0] = [p for p in opts["sys_path"] if p not in sys.path]
    os.environ.update(opts["environ"])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    warnings.simplefilter("ignore")  # torch's UserWarnings would tear the live display
    torch.set_num_threads(1)  # one core per worker: the campaign runs one worker per core
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        index, target_ref, check_name, deadline, cases = job
        conn.send((index, _run_pair(target_ref, check_name, deadline, opts, cases)))


# -- the parent side ----------------------------------------------------------------------

@dataclass
class _Slot:
    proc: Any
    conn: Any
    job: tuple | None = None  # (index, target, check, started)


def _signal_name(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


def _forget_inflight(corpus, pid: int) -> None:
    """A worker killed by the campaign's own deadline did not crash: drop its
    journal entries so that recovery does not record its case as a crash."""
    if corpus is None:
        return
    from fuzzdiff.journal import INFLIGHT
    for entry in (Path(corpus) / INFLIGHT).glob(f"*-{pid}-*"):
        entry.unlink(missing_ok=True)


def run_campaign(pairs: Iterable[tuple[Target, Check]], *, max_examples: int,
                 budget: float | None = None, seed: int | None = None, corpus=None,
                 jobs: int | None = None, dtypes: Sequence[torch.dtype] | None = None,
                 device: str | None = None, pair_seconds: float | None = None,
                 grace: float | None = None, variants: int | None = None,
                 timeout: float | None = None,
                 on_result: Callable[[PairResult], None] | None = None,
                 on_start: Callable[[int, str | None, str | None], None] | None = None) -> Campaign:
    """Fuzz each pair with ``max_examples`` in ``jobs`` worker processes (default:
    every core); stop starting pairs after ``budget`` seconds.

    ``pair_seconds`` bounds one pair's new examples (default: a tenth of the
    budget, at least 10 s; none without a budget); ``grace`` is how long after
    the budget a busy worker may finish shrinking (default: a fifth of the
    budget, at least 30 s). ``on_start(slot, target, check)`` (None, None: the
    worker has nothing left to do) and ``on_result(result)`` report progress.
    """
    from fuzzdiff.journal import recover

    jobs = max(1, jobs or os.cpu_count() or 1)
    if budget is not None and pair_seconds is None:
        pair_seconds = max(10.0, budget / 10)
    if budget is not None and grace is None:
        grace = max(30.0, budget / 5)
    todo = deque()
    for target, check in pairs:
        cases = case_options(target, check, dtypes, device)
        if cases is not None:
            todo.append((target.ref, target.name, check.name, cases, check.name in target.known))
    campaign = Campaign(jobs=jobs)
    import sys
    opts = dict(max_examples=max_examples, seed=seed, corpus=None if corpus is None else str(corpus),
                variants=variants, timeout=timeout, sys_path=list(sys.path),
                environ={k: v for k, v in os.environ.items() if k.startswith(("FUZZDIFF_", "HYPOTHESIS"))})
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["fuzzdiff.campaign", "fuzzdiff.targets.catalog"])
    slots: list[_Slot | None] = [None] * min(jobs, len(todo))
    start = end = None
    index = 0

    def spawn() -> _Slot:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(child, opts), daemon=True)
        proc.start()
        child.close()
        return _Slot(proc, parent)

    def finish(k: int, result: PairResult) -> None:
        slots[k].job = None
        campaign.results.append(result)
        if on_result:
            on_result(result)
        if on_start and not todo:
            on_start(k, None, None)

    try:
        for k in range(len(slots)):
            slots[k] = spawn()
        # The budget is fuzzing time: it starts once the workers are up (the
        # forkserver's first start imports torch, seconds on a busy machine).
        start = time.monotonic()
        end = None if budget is None else start + budget
        while True:
            now = time.monotonic()
            if end is not None and now >= end and todo:
                campaign.skipped_for_budget += len(todo)
                todo.clear()
            for k, slot in enumerate(slots):
                if slot.job is None and todo:
                    if not slot.proc.is_alive():
                        slot = slots[k] = spawn()
                    target_ref, name, check_name, cases, known = todo.popleft()
                    limits = [s for s in (pair_seconds, None if end is None else end - now) if s is not None]
                    slot.conn.send((index, target_ref, check_name, min(limits) if limits else None, cases))
                    slot.job = (index, target_ref, name, check_name, now, known)
                    index += 1
                    if on_start:
                        on_start(k, name, check_name)
            busy = [(k, s) for k, s in enumerate(slots) if s.job is not None]
            if not busy:
                break
            ready = wait([s.conn for _, s in busy] + [s.proc.sentinel for _, s in busy], timeout=1.0)
            for k, slot in busy:
                if slot.conn in ready:
                    try:
                        _, result = slot.conn.recv()
                    except (EOFError, OSError):
                        pass  # died: reported below once the process is gone
                    else:
                        result.known = result.failure is not None and slot.job[5]
                        finish(k, result)
                        continue
                if slot.proc.sentinel in ready or not slot.proc.is_alive():
                    slot.proc.join(timeout=5)
                    _, target_ref, name, check_name, started, _ = slot.job
                    finish(k, PairResult(name, check_name, Tally(), crashed=True, ref=target_ref,
                                         error=f"the worker died ({_signal_name(slot.proc.exitcode)}) "
                                               "running this pair",
                                         seconds=time.monotonic() - started))
            if end is not None and time.monotonic() > end + grace:
                for k, slot in enumerate(slots):
                    if slot.job is not None:
                        _, target_ref, name, check_name, started, _ = slot.job
                        slot.proc.kill()
                        slot.proc.join(timeout=5)
                        _forget_inflight(corpus, slot.proc.pid)
                        finish(k, PairResult(name, check_name, Tally(), cut=True, ref=target_ref,
                                             seconds=time.monotonic() - started))
    finally:
        for slot in slots:
            if slot is None:
                continue
            if slot.proc.is_alive():
                if slot.job is None:
                    try:
                        slot.conn.send(None)
                    except OSError:
                        pass
                    slot.proc.join(timeout=5)
                if slot.proc.is_alive():  # interrupted mid-pair, or did not stop
                    slot.proc.kill()
                    slot.proc.join(timeout=5)
                    _forget_inflight(corpus, slot.proc.pid)
            slot.conn.close()
    start = time.monotonic() if start is None else start
    if corpus is not None:
        campaign.recovered = recover(corpus, cause="a fuzzdiff run worker died")
        _attach(campaign, corpus, start)
    campaign.seconds = time.monotonic() - start
    return campaign


def _attach(campaign: Campaign, corpus, start: float) -> None:
    """Give each crash record written during the campaign to the crashed pair
    it came from (``corpus/<check>/<target>/<id>.json``). Any worker's next
    fuzz() may have recovered it already, so the corpus is looked at, not
    only what the final recover() returned."""
    import json

    crashed = {(r.check, _safe(r.ref or r.target)): r for r in campaign.results if r.crashed}
    if not crashed:
        return
    since = time.time() - (time.monotonic() - start)
    for (check, target), r in crashed.items():
        for path in sorted((Path(corpus) / check / target).glob("*.json")):
            try:
                if path.stat().st_mtime < since or json.loads(path.read_text())["verdict"]["kind"] != "crash":
                    continue
            except (OSError, ValueError, KeyError, TypeError):
                continue  # not a record this campaign wrote
            r.crash_records.append(str(path))


def _safe(name: str) -> str:
    from fuzzdiff.corpus import _safe as safe
    return safe(name)
