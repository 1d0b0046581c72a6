"""The nodes of the autograd graph behind some outputs, each once.

Three questions walk it: whether a second derivative passes through a backward
marked once_differentiable (fuzzdiff.guards.unsupported), which rules of the
code's own take part (fuzzdiff.search.inspection), and which of them run a
loop that stops on its values (fuzzdiff.confirm.stopping).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

__all__ = ["graph_nodes"]


def graph_nodes(outputs: Any) -> Iterator[Any]:
    """Each node of the graph behind the tensors among ``outputs`` (any pytree), once."""
    todo = [t.grad_fn for t in tree_leaves(outputs) if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    seen: set[int] = set()
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        todo.extend(n for n, _ in node.next_functions if n is not None)
