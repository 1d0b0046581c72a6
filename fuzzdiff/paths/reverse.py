"""Reverse mode: vector-Jacobian products."""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["vjp"]


def vjp(
    outputs: Sequence[torch.Tensor],
    leaves: Sequence[torch.Tensor],
    cotangents: Sequence[torch.Tensor],
    *,
    create_graph: bool = False,
) -> list[torch.Tensor]:
    """``J^T v`` for each leaf; zeros where a leaf does not reach the outputs."""
    pairs = [(o, v) for o, v in zip(outputs, cotangents) if o.requires_grad]
    if not pairs:
        return [torch.zeros_like(l) for l in leaves]
    grads = torch.autograd.grad(
        [o for o, _ in pairs], list(leaves), [v for _, v in pairs], allow_unused=True, create_graph=create_graph
    )
    return [torch.zeros_like(l) if g is None else g for g, l in zip(grads, leaves)]
