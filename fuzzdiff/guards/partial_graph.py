"""torch.export's partial graph, kept off the caller's stderr.

When an export fails, torch prints the graph traced so far
(``e.partial_fx_graph``) to ``sys.stderr`` before it raises. The exception
carries the same graph, so that print is dropped, and only it
(fuzzdiff.guards.held_stderr).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from fuzzdiff.guards.held_stderr import held_stderr

__all__ = ["partial_graph_kept"]


def _without_graph(text: str, raised: BaseException | None) -> str:
    graph = getattr(raised, "partial_fx_graph", None)
    if isinstance(graph, str) and graph:
        return text.replace(graph + "\n", "")  # printed once per wrapper it passes
    return text


@contextlib.contextmanager
def partial_graph_kept() -> Iterator[None]:
    """Run an export with its partial graph kept on its exception, not printed."""
    with held_stderr(_without_graph):
        yield
