"""fuzzdiff's exceptions, one family: ``except FuzzdiffError`` catches every error it raises.

An error keeps the builtin base its callers know it by as well (``SpecError``
is a ``ValueError``, ``UnknownTarget`` a ``KeyError``). What unwinds a run on
purpose (an example's timeout, a budget's end, a worker told to stop) is a
``FuzzdiffInterrupt``: like KeyboardInterrupt, a BaseException that ``except
Exception`` in the code under test cannot swallow. Python allows no class
that is both, so the interrupts are the family's other branch, and
``FAMILY`` names both. A warning's category is no error, and stays out.
"""

from __future__ import annotations

__all__ = ["FuzzdiffError", "FuzzdiffInterrupt", "FAMILY"]


class FuzzdiffError(Exception):
    """The base of every error fuzzdiff raises."""


class FuzzdiffInterrupt(BaseException):
    """The base of fuzzdiff's interrupts: control flow that must pass ``except Exception``."""


FAMILY = (FuzzdiffError, FuzzdiffInterrupt)
