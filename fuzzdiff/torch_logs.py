"""torch's own log messages during a run, counted instead of printed.

Checks drive torch's compiler and transforms hard, and torch logs as it
goes: a fake-tensor conversion that fails logs its whole traceback at ERROR
(then raises, and the check reports it once), a recompile logs a warning.
Hundreds of such lines, between a user's own output, say nothing the report
does not; so for the length of a ``fuzzdiff.check`` they are counted by text
and the report shows the commonest once. The loggers' handlers are the
caller's again afterwards.
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
    """Whether the logger writes to a stream (not a structured trace file)."""
    return bool(logger.handlers) and all(type(h) is logging.StreamHandler for h in logger.handlers)


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
            swapped.append((logger, logger.handlers))
            logger.handlers = [handler]
    try:
        yield counts
    finally:
        for logger, handlers in swapped:
            logger.handlers = handlers
