"""torch's own log messages during a run, counted instead of printed.

Checks drive torch's compiler and transforms hard, and torch logs as it
goes: a fake-tensor conversion that fails logs its whole traceback at ERROR
(then raises, and the check reports it once), a recompile logs a warning.
Hundreds of such lines, between a user's own output, say nothing the report
does not; so for the length of a ``fuzzdiff.check`` they are counted by text
and the report shows the commonest once. The loggers' handlers are the
caller's again afterwards, and a logger the caller turned up ($TORCH_LOGS)
logs as it would.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["torch_logs"]


class _Counting(logging.Handler):
    def __init__(self, counts: Counter[str]):
        super().__init__(logging.DEBUG)
        self.counts = counts

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage().strip().splitlines()
        except Exception:  # noqa: BLE001 - a record that cannot format is still one message
            text = [str(record.msg)]
        self.counts[f"{record.levelname} {record.name}: {(text or [''])[0][:200]}"] += 1


def _prints(logger: logging.Logger) -> bool:
    """Whether the logger has handlers of its own that show or keep its records
    (a stream, a test runner's capture), not torch's structured trace alone,
    and the caller did not ask for more of it than warnings ($TORCH_LOGS,
    torch._logging.set_logs: a level below WARNING)."""
    asked = logging.NOTSET < logger.level < logging.WARNING
    return not asked and any(type(h).__name__ != "LazyTraceHandler" for h in logger.handlers)


@contextmanager
def torch_logs(capture: bool = True) -> Iterator[Counter[str]]:
    """Count the log records of torch's loggers during the block, by text
    (``capture=False``: leave them be, and count nothing)."""
    counts: Counter[str] = Counter()
    if not capture:
        yield counts
        return
    handler = _Counting(counts)
    swapped = []
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger) and name.split(".")[0] == "torch" and _prints(logger):
            swapped.append((logger, logger.handlers, logger.propagate))
            logger.handlers = [handler]
    # torch's root logger too, whether torch set up its logging yet or not: a
    # record that reaches a handler that keeps it (pytest's log capture) keeps
    # its exception's frames alive, and a guard of torch in them (fuzzdiff.guards.torch_state)
    root = logging.getLogger("torch")
    if all(logger is not root for logger, _, _ in swapped):
        swapped.append((root, root.handlers, root.propagate))
        root.handlers = [handler]
    root.propagate = False
    try:
        yield counts
    finally:
        for logger, handlers, propagate in swapped:
            logger.handlers = handlers
            logger.propagate = propagate
