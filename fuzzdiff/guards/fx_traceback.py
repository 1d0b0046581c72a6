"""An FX graph's traceback, kept off the caller's stderr.

A ``GraphModule`` whose generated code raises prints the traceback and the
lines around the failing one to ``sys.stderr`` (``_WrappedCall``), then
raises the same error: under compiled autograd, once per failing backward,
twenty lines of a captured graph that the raised error already names. Those
prints are dropped, and only they (fuzzdiff.guards.held_stderr).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from fuzzdiff.guards.held_stderr import held_stderr

__all__ = ["fx_traceback_kept"]

_START = "Traceback (most recent call last):"
_MARK = "Call using an FX-traced Module, line "
_HERE = "<--- HERE\n"
_AFTER = 4  # lines after the marker: two of the graph's code, each followed by a blank one


def _without_fx_prints(text: str, raised: BaseException | None = None) -> str:
    kept, rest = [], text
    while _MARK in rest:
        mark = rest.index(_MARK)
        start = rest.find(_START)
        here = rest.find(_HERE, mark)
        if start < 0 or start > mark or here < 0:
            break
        end = here + len(_HERE)
        for _ in range(_AFTER):  # the graph's code is indented, or blank
            newline = rest.find("\n", end)
            line = rest[end : len(rest) if newline < 0 else newline]
            if line.strip() and not line[:1].isspace():
                break
            end = len(rest) if newline < 0 else newline + 1
        kept.append(rest[:start])
        rest = rest[end:]
    return "".join(kept) + rest


@contextlib.contextmanager
def fx_traceback_kept() -> Iterator[None]:
    """Run graphs whose failures raise their error and print nothing besides."""
    with held_stderr(_without_fx_prints):
        yield
