"""Rerunning a failure in a fresh process before it is called the target's.

A process in which torch once failed an internal assert, or a compile broke
half-way, may fail everything after it: a long campaign worker, or one
``fuzzdiff.check`` running every check in a row. What fails only there is
the process's state, not the target. So a confirmed failure is rerun once
more, in a Python process that has run nothing else (``FreshProcess``), from
the very record that would be written: the same check, case, values and
target recipe. That process also gathers the evidence of whose bug it is
(fuzzdiff.search.blame), away from whatever the first one went through.

The rerunning process is started on the first failure (``boot``: while
that failure shrinks, so that its start costs the rerun no time) and serves
the following ones, until it is disturbed itself or its owner closes it; it
ends by itself when its owner dies (its stdin closes). A rerun bounded by a
time budget that ends first is given up, the process stopped at once.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fuzzdiff.case.case import Case
from fuzzdiff.checks import get_check
from fuzzdiff.confirm.ladder import repeat_only
from fuzzdiff.guards import torch_state
from fuzzdiff.paths.vmap import stop_recording_fallbacks
from fuzzdiff.record.files import read_record, write_record
from fuzzdiff.search.blame import Blame, blame, gather
from fuzzdiff.search.runner import run_check
from fuzzdiff.targets import resolve
from fuzzdiff.verdict import Verdict, mismatch

__all__ = ["FreshProcess", "Rerun", "RERUN_SECONDS"]

RERUN_SECONDS = 600.0  # a rerun that compiles (an inductor compile on busy cores) takes minutes at worst
START_SECONDS = 120.0  # importing torch and fuzzdiff, on busy cores
CLOSE_SECONDS = 0.2  # an idle process's own exit, before it is killed: it holds nothing to save


@dataclass(frozen=True)
class Rerun:
    """A fresh process's answer: the verdict there, whose bug it is, and the
    stand-in's code and verdict (fuzzdiff.search.blame.Evidence, as JSON); or
    ``failed``: why there is no answer (the target cannot be rebuilt there,
    the process died or took too long)."""

    verdict: Verdict | None = None
    blame: Blame | None = None
    evidence: Mapping[str, Any] | None = None
    failed: str | None = None
    late: bool = False  # no answer before the instant it was given (``by``)


class FreshProcess:
    """A clean Python process that reruns failures (see the module's docstring)."""

    def __init__(self, timeout: float = RERUN_SECONDS):
        self.timeout = timeout
        self._proc: subprocess.Popen | None = None
        self._answers: int | None = None  # the read end of the answers' pipe
        self._log: Any = None
        self._ready = False  # it said "ready": idle between reruns, it ends at once when its stdin closes
        self._folder = tempfile.TemporaryDirectory(prefix="fuzzdiff-fresh-")
        self.reruns = 0
        self.seconds = 0.0

    def rerun(
        self,
        check: str,
        case: Case,
        verdict: Verdict,
        definition: Mapping | None = None,
        seconds: float | None = None,
        confirmed: bool = False,
        by: float | None = None,
    ) -> Rerun:
        """The verdict of ``check`` at ``case`` in a fresh process, with the
        blame; ``definition`` rebuilds a user target there (its recipe).
        ``seconds`` bounds the rerun's own wait (default: ``timeout``), once
        the process has started; ``by`` (a time.monotonic() instant) bounds
        the whole, its start included. A failure ``confirmed`` here already
        is rerun there without its confirmation ladder
        (fuzzdiff.confirm.ladder.repeat_only)."""
        start = time.monotonic()
        try:
            path, _ = write_record(self._folder.name, check, case, verdict, definition=definition)
            return self._ask(path, self.timeout if seconds is None else seconds, confirmed, by)
        finally:
            self.reruns += 1
            self.seconds += time.monotonic() - start

    def boot(self) -> None:
        """Start the process now, without waiting for it: the next rerun finds it ready sooner."""
        if self._proc is None or self._proc.poll() is not None:
            self.close()
            self._spawn()

    def _ask(self, record: Path, seconds: float, confirmed: bool = False, by: float | None = None) -> Rerun:
        # the process's start (importing torch, seconds on busy cores) counts
        # against ``by`` only: the rerun itself gets its ``seconds`` in full
        end = math.inf if by is None else by
        if self._proc is None or self._proc.poll() is not None:
            self.close()
            failed = self._spawn()
            if failed is not None:
                return Rerun(failed=failed)
        if not self._ready:
            failed = self._wait_ready(min(START_SECONDS, end - time.monotonic()))
            if failed is not None:
                return Rerun(failed=failed, late=by is not None and time.monotonic() >= by)
        assert self._proc is not None and self._proc.stdin is not None and self._answers is not None
        end = min(end, time.monotonic() + seconds)
        seconds = end - time.monotonic()
        try:
            self._proc.stdin.write(json.dumps({"record": str(record), "confirmed": confirmed}) + "\n")
            self._proc.stdin.flush()
        except OSError as e:
            self.close()
            return Rerun(failed=f"the rerunning process is gone ({e}){self._tail()}")
        self._ready = False  # busy: it reads its stdin again only once it has answered
        line = self._read_line(seconds)
        if line is None:
            tail = self._tail()
            self.close()
            late = by is not None and time.monotonic() >= by
            return Rerun(failed=f"no answer from the rerunning process within {seconds:.1f} s{tail}", late=late)
        self._ready = True
        answer = json.loads(line)
        if answer.get("disturbed"):
            self.close()  # its next rerun would not be in a fresh process
        if "failed" in answer:
            return Rerun(failed=answer["failed"])
        v = answer["verdict"]
        return Rerun(
            Verdict(v["kind"], v["message"], v["errors"]),
            Blame.from_json(answer.get("blame")),
            answer.get("evidence"),
        )

    def _spawn(self) -> str | None:
        read, write = os.pipe()
        self._log = tempfile.TemporaryFile(mode="w+")
        try:
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _BOOT,
                    str(write),
                    json.dumps([p or os.getcwd() for p in sys.path]),
                    os.path.join(self._folder.name, "compile-cache"),
                ],
                stdin=subprocess.PIPE,
                stdout=self._log,
                stderr=self._log,
                pass_fds=(write,),
                cwd=os.getcwd(),
                text=True,
            )
        except OSError as e:
            os.close(read)
            return f"could not start a fresh Python process: {e}"
        finally:
            os.close(write)
        self._answers = read
        return None

    def _wait_ready(self, seconds: float) -> str | None:
        ready = self._read_line(seconds)
        if ready != "ready":
            tail = self._tail()
            self.close()
            return f"the fresh process did not start within {seconds:.1f} s{tail}"
        self._ready = True
        return None

    def _read_line(self, seconds: float) -> str | None:
        """One line from the answers' pipe, or None at EOF or after ``seconds``."""
        assert self._answers is not None
        data = b""
        end = time.monotonic() + seconds
        while not data.endswith(b"\n"):
            left = end - time.monotonic()
            if left <= 0 or not select.select([self._answers], [], [], left)[0]:
                return None
            chunk = os.read(self._answers, 1 << 16)
            if not chunk:
                return None
            data += chunk
        return data.decode().strip()

    def _tail(self) -> str:
        if self._log is None:
            return ""
        try:
            self._log.seek(0)
            lines = [line for line in self._log.read().splitlines() if line.strip()]
        except (OSError, ValueError):
            return ""
        return f": {lines[-1][:300]}" if lines else ""

    def close(self) -> None:
        """End the process: an idle one by closing its stdin (killed if it
        takes longer than CLOSE_SECONDS to go: a time budget waits on it), one
        still starting or rerunning at once (it would not read its stdin in time)."""
        if self._proc is not None:
            try:
                if self._proc.stdin is not None:
                    self._proc.stdin.close()
                if not self._ready:
                    raise subprocess.TimeoutExpired(self._proc.args, 0)
                self._proc.wait(timeout=CLOSE_SECONDS)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
            self._proc = None
            self._ready = False
        if self._answers is not None:
            os.close(self._answers)
            self._answers = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> FreshProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        self._folder.cleanup()


# -- the fresh process's side --------------------------------------------------------------

# The whole child: the caller's import path first, so that fuzzdiff and the
# target's own modules import there too; and compile caches of its own, empty:
# inductor's on-disk caches are shared by every process of the user, and an
# artifact compiled in a process whose state was broken would rerun the
# failure in the fresh one too.
_BOOT = (
    "import json, os, sys; sys.path[:0] = json.loads(sys.argv[2]); "
    "os.environ['TORCHINDUCTOR_CACHE_DIR'] = os.environ['TRITON_CACHE_DIR'] = sys.argv[3]; "
    "from fuzzdiff.search.fresh import _serve; _serve(int(sys.argv[1]))"
)


def _serve(answers: int) -> None:
    """Replay the records named on stdin, one JSON answer per line on ``answers``."""
    torch.set_num_threads(1)  # a process of fuzzdiff's own, beside the one that called it
    stop_recording_fallbacks()  # its stderr is the caller's: no vmap fallback warning per call
    torch_state.settle()
    out = os.fdopen(answers, "w")
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        before = torch_state.disturbances()
        try:
            asked = json.loads(line)
            answer = _rerun(asked["record"], bool(asked.get("confirmed")))
        except Exception as e:  # noqa: BLE001 - any error is an answer, never a dead replayer
            answer = {"failed": f"the fresh process could not rerun it: {type(e).__name__}: {e}"}
        answer["disturbed"] = torch_state.disturbances() > before
        out.write(json.dumps(answer, default=str) + "\n")
        out.flush()


def _rerun(path: str, confirmed: bool = False) -> dict:
    record = read_record(path)
    # its stored source was written by the process that asked; an OpInfo target is its stored call, as repro.load's
    target = resolve(
        record.target,
        record.definition,
        record.opinfo_sample,
        trust_source=True,
        module_target=record.check == "per_sample",  # per-sample gradients are of the module itself
    )
    with repeat_only() if confirmed else contextlib.nullcontext():
        verdict = run_check(record.check, target, record.case)
    answer: dict = {"verdict": {"kind": verdict.kind, "message": verdict.message, "errors": verdict.errors}}
    if verdict.failed or mismatch(record.verdict, verdict) is None:  # the same failure, replayed
        evidence = gather(get_check(record.check), target, record.case, record.verdict)
        answer["blame"] = blame(record.check, target, record.verdict, evidence).to_json()
        answer["evidence"] = evidence.to_json()
    return answer
