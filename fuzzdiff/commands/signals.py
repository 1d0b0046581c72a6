"""Stop signals end a command as Ctrl-C does (fuzzdiff run and fuzzdiff check)."""

from __future__ import annotations

import contextlib
import signal
import threading

__all__ = ["stops_interrupt"]


def _interrupt(signum, frame):
    raise KeyboardInterrupt


@contextlib.contextmanager
def stops_interrupt():
    """SIGTERM (a CI job cancelled, a cluster scheduler) and SIGHUP (the terminal
    gone) end the command as Ctrl-C does, where they would kill it on the spot:
    the examples in flight unwind and are forgotten (fuzzdiff.record.journal), not
    left behind to be recorded later as crashes. A signal already handled or
    ignored (nohup) is left as it is."""
    installed = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) == signal.SIG_DFL:
                installed[sig] = signal.signal(sig, _interrupt)
    try:
        yield
    finally:
        for sig, before in installed.items():
            signal.signal(sig, before)
