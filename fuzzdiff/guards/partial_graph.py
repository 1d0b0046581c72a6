"""torch.export's partial graph, kept off the caller's stderr.

When an export fails, torch prints the graph traced so far
(``e.partial_fx_graph``) to ``sys.stderr`` before it raises: dozens of lines
per failing case, written into a user's terminal or a campaign's log by the
thousands. The exception carries the same graph, so that print is dropped,
and only it: anything else written to stderr meanwhile (a warning shown)
reaches it as ever, once the export is over.
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Iterator

__all__ = ["partial_graph_kept"]


@contextlib.contextmanager
def partial_graph_kept() -> Iterator[None]:
    """Run an export with its partial graph kept on its exception, not printed."""
    stderr, held = sys.stderr, io.StringIO()
    sys.stderr = held
    try:
        yield
    except BaseException as e:
        graph = getattr(e, "partial_fx_graph", None)
        text = held.getvalue()
        if isinstance(graph, str) and graph:
            text = text.replace(graph + "\n", "")  # printed once per wrapper it passes
        held = io.StringIO(text)
        raise
    finally:
        sys.stderr = stderr
        if held.getvalue().strip():
            stderr.write(held.getvalue())
