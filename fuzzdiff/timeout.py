"""Per-example timeouts: a hanging case becomes a ``timeout`` record, not a stuck suite.

Two layers, armed around every example by ``fuzz()``:

soft
    a periodic ``setitimer(ITIMER_REAL)`` and a SIGALRM handler that raises
    ExampleTimeout in the main thread once the example in flight has run for
    ``timeout`` (caught within timeout + timeout/8). It interrupts Python-level loops,
    ``time.sleep`` and any torch call that returns; ``fuzz()`` then reports
    the case once as a FuzzFailure of kind ``timeout`` (and writes its record).
    Only in the main thread, and only when nobody else owns SIGALRM.
hard
    ``faulthandler.dump_traceback_later(timeout + grace, exit=True)``: a C
    thread that needs no GIL, so it also stops a process stuck inside one long
    C call (holding the GIL or not) or in code that swallows the soft
    exception. It writes the tracebacks to the journal's ``.hang`` file and
    exits with status 1; the journal entry then becomes a ``timeout`` record
    at the next ``recover()`` (the xdist controller at once, otherwise the
    next run). Re-armed lazily, at most every grace/2 seconds, so it costs
    nothing per example; a hung example is stopped between timeout + grace/2
    and timeout + grace after it started.
"""

from __future__ import annotations

import faulthandler
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path

__all__ = ["ExampleTimeout", "Watchdog", "grace", "limited"]


class ExampleTimeout(BaseException):
    """Raised by the soft timeout. A BaseException so that it passes through
    ``run_check``'s and targets' ``except Exception`` (which would turn it into
    a "fail" and replay the hang), and so that Hypothesis re-raises it at once
    instead of shrinking: each shrink step of a hang would cost a full timeout."""

    def __init__(self, seconds: float):
        super().__init__(f"the example did not finish within {seconds:g}s")
        self.seconds = seconds


def grace(timeout: float) -> float:
    """How long past the timeout the hard layer waits for a C call to return."""
    return max(2.0, timeout / 2)


def _soft_possible() -> bool:
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return False
    return signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN, None)


class Watchdog:
    """Both layers for one fuzz() call: ``start()`` / ``stop()`` around each
    example, ``close()`` at the end. ``hang_path`` receives the hard layer's
    tracebacks (standard error when None).

    No system call per example: the soft layer is a periodic SIGALRM every
    ``tick`` (timeout/8) whose handler compares the clock with the start of
    the example in flight, so a hang is caught between timeout and
    timeout + tick; ``start`` and ``stop`` only set a float."""

    def __init__(self, timeout: float, hang_path: Path | None = None):
        self.timeout = float(timeout)
        self.grace = grace(self.timeout)
        self.tick = min(self.timeout, max(0.05, self.timeout / 8))
        self.soft = _soft_possible()
        self._started: float | None = None
        self._armed_at = -1e300
        self._hang_path = hang_path
        # fd 2, not sys.stderr: under pytest's capture that has no fileno.
        self._hang = open(hang_path, "w") if hang_path is not None else 2
        if self.soft:
            self._previous = signal.signal(signal.SIGALRM, self._on_alarm)
            signal.setitimer(signal.ITIMER_REAL, self.tick, self.tick)

    def _on_alarm(self, signum, frame):
        started = self._started
        if started is not None and time.monotonic() - started >= self.timeout:
            self._started = None
            raise ExampleTimeout(self.timeout)

    def start(self) -> None:
        now = self._started = time.monotonic()
        if now - self._armed_at > self.grace / 2:
            faulthandler.dump_traceback_later(self.timeout + self.grace, exit=True, file=self._hang)
            self._armed_at = now

    def stop(self) -> None:
        self._started = None

    def close(self) -> None:
        self._started = None
        faulthandler.cancel_dump_traceback_later()
        if self.soft:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous)
            self.soft = False
        if self._hang_path is not None and not isinstance(self._hang, int) and not self._hang.closed:
            self._hang.close()
            self._hang_path.unlink(missing_ok=True)


@contextmanager
def limited(timeout: float, hang_path: Path | None = None):
    """Both layers around one call outside ``fuzz()``, e.g. replaying a
    ``timeout`` record: raises ExampleTimeout instead of hanging (the hard
    layer still stops the process if the call cannot be interrupted)."""
    timeout = float(timeout)
    if timeout <= 0:
        yield
        return
    watch = Watchdog(timeout, hang_path)
    try:
        watch.start()
        yield
    finally:
        watch.close()
