"""Reverse mode: vector-Jacobian products."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

__all__ = ["vjp", "first_derivative"]


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


def first_derivative(
    f: Callable[..., Sequence[torch.Tensor]], v: Sequence[torch.Tensor]
) -> Callable[..., list[torch.Tensor]]:
    """``x -> J^T v`` at ``x``, by reverse mode: the function whose finite
    differences are a second derivative's reference (``v`` cast to each output's dtype)."""

    def gradient(*x: torch.Tensor) -> list[torch.Tensor]:
        with torch.enable_grad():
            moved = [t.detach().requires_grad_() for t in x]
            outs = f(*moved)
            return vjp(outs, moved, [vi.to(o.dtype) for vi, o in zip(v, outs)])

    return gradient
