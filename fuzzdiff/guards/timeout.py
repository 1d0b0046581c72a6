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

A deadline (``fuzzdiff.check``'s time budget) rides on the soft layer: the
example in flight when the clock passes it is interrupted with OutOfTime,
which is no finding (the example is simply not judged). Never the hard
layer: a C call that runs past a budget is let finish, not the process
ended. ``bounded`` is the deadline alone, around work outside ``fuzz()``.
"""

from __future__ import annotations

import faulthandler
import gc
import signal
import threading
import time
import weakref
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from fuzzdiff.errors import FuzzdiffInterrupt

__all__ = ["ExampleTimeout", "OutOfTime", "Watchdog", "bounded", "grace", "limited"]


class ExampleTimeout(FuzzdiffInterrupt):
    """Raised by the soft timeout. A BaseException so that it passes through
    ``run_check``'s and targets' ``except Exception`` (which would turn it into
    a "fail" and replay the hang), and so that Hypothesis re-raises it at once
    instead of shrinking: each shrink step of a hang would cost a full timeout."""

    def __init__(self, seconds: float):
        super().__init__(f"the example did not finish within {seconds:g}s")
        self.seconds = seconds


class OutOfTime(FuzzdiffInterrupt):
    """The time budget ended: raised by the soft layer at a deadline, and by
    the search before a case it has no time for. A BaseException for
    ExampleTimeout's reasons: no ``except Exception`` of a target turns it into
    a verdict, and Hypothesis lets it through without shrinking."""


# Seconds between the soft layer's alarms when only a deadline is armed: the
# alarm itself is set for the deadline, this only bounds how stale a re-arm gets.
DEADLINE_TICK = 1.0


# Seconds until the soft layer tries again where its alarm came inside code
# that cannot pass an exception on (a garbage collector's callback, a __del__).
AGAIN = 0.01


def _swallowed(frame: FrameType | None) -> bool:
    """Whether an exception raised in ``frame`` would be lost: Python prints
    it as unraisable and goes on (Hypothesis times the collector with a
    callback, which a periodic alarm often lands in; a weak reference's
    callback, such as a WeakValueDictionary's, runs where its value dies).
    Any frame of weakref's own code waits the moment too."""
    if frame is None:
        return False
    code = frame.f_code
    return (
        code.co_name == "__del__"
        or code.co_filename == weakref.__file__
        or any(getattr(cb, "__code__", None) is code for cb in gc.callbacks)
    )


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
    tracebacks (standard error when None). ``timeout`` 0 arms neither layer's
    limit on an example; ``deadline`` (a time.monotonic() instant) interrupts
    the example in flight when the clock passes it, with OutOfTime.

    No system call per example: the soft layer is a periodic SIGALRM every
    ``tick`` (timeout/8) whose handler compares the clock with the start of
    the example in flight, so a hang is caught between timeout and
    timeout + tick; ``start`` and ``stop`` only set a float. With a deadline
    the next alarm is set for it when it comes before the next tick."""

    def __init__(self, timeout: float, hang_path: Path | None = None, deadline: float | None = None):
        self.timeout = float(timeout)
        self.deadline = deadline
        self.grace = grace(self.timeout)
        self.tick = min(self.timeout, max(0.05, self.timeout / 8)) if self.timeout > 0 else DEADLINE_TICK
        self.soft = _soft_possible() and (self.timeout > 0 or deadline is not None)
        self._started: float | None = None
        self._armed_at = -1e300
        self._hang_path = hang_path
        # fd 2, not sys.stderr: under pytest's capture that has no fileno.
        self._hang = open(hang_path, "w") if hang_path is not None else 2
        if self.soft:
            self._previous = signal.signal(signal.SIGALRM, self._on_alarm)
            self._arm(time.monotonic())

    def _arm(self, now: float) -> None:
        """The next alarm: a tick from now, or the deadline where it comes first."""
        first = self.tick
        if self.deadline is not None and self.deadline > now:
            first = max(0.001, min(first, self.deadline - now))
        signal.setitimer(signal.ITIMER_REAL, first, self.tick)

    def _on_alarm(self, signum, frame):
        started, now = self._started, time.monotonic()
        due: BaseException | None = None
        if started is not None and self.deadline is not None and now >= self.deadline:
            due = OutOfTime(f"stopped at the budget's end, an example {now - started:.1f} s in")
        elif started is not None and self.timeout > 0 and now - started >= self.timeout:
            due = ExampleTimeout(self.timeout)
        if due is not None:
            if _swallowed(frame):  # raised there, it would be printed and lost: again in a moment
                signal.setitimer(signal.ITIMER_REAL, AGAIN, self.tick)
                return
            self._started = None
            raise due
        if self.deadline is not None and now < self.deadline:
            self._arm(now)

    def start(self) -> None:
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline:
            raise OutOfTime("the budget had ended before the example started")
        self._started = now
        if self.timeout > 0 and now - self._armed_at > self.grace / 2:
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


@contextmanager
def bounded(deadline: float | None):
    """The soft layer's deadline alone around one piece of work outside
    ``fuzz()`` (a probe, a failure's evidence): OutOfTime when the clock
    passes ``deadline``, at once if it has passed already. Without a deadline,
    or where the soft layer is not possible (not the main thread, SIGALRM
    taken), the work runs unbounded."""
    if deadline is None:
        yield
        return
    if time.monotonic() >= deadline:
        raise OutOfTime("the budget had ended before it started")
    watch = Watchdog(0, deadline=deadline)
    try:
        watch.start()
        yield
    finally:
        watch.close()
