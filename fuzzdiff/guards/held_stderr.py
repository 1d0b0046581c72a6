"""Text torch prints to stderr beside what it raises, kept off the caller's stderr.

Some failures print what their exception already carries (an export's
partial graph, an FX graph's traceback), once per wrapper they pass: dozens of
lines per failing case, in a user's terminal or by the thousands in a
campaign's log. ``held_stderr`` holds stderr while a block runs and writes
back what is left once ``keep`` has cut those prints, and only those: a
warning shown meanwhile reaches stderr as ever, when the block is over.
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Callable, Iterator

__all__ = ["held_stderr"]


@contextlib.contextmanager
def held_stderr(keep: Callable[[str, BaseException | None], str]) -> Iterator[None]:
    """Run a block with stderr held; ``keep(text, raised)`` says what of it
    to write back (``raised``: the block's exception, or None)."""
    stderr, held = sys.stderr, io.StringIO()
    sys.stderr = held
    raised: BaseException | None = None
    try:
        yield
    except BaseException as e:
        raised = e
        raise
    finally:
        sys.stderr = stderr
        text = keep(held.getvalue(), raised)
        if text.strip():
            stderr.write(text)
