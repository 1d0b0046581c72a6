"""Finite differences along a direction, as JAX's check_grads does.

Always in float64 on leaves that hold exactly the case's values: the reference
must be more precise than what it judges.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

__all__ = ["central", "one_sided"]


def _at(f, leaves, directions, h):
    with torch.no_grad():
        return f(*[torch.add(l, u, alpha=h) for l, u in zip(leaves, directions)])


def _prepare(leaves, directions):
    return ([l.detach() for l in leaves],
            [u if u.dtype == l.dtype else u.to(l.dtype) for l, u in zip(leaves, directions)])


def central(f: Callable, leaves: Sequence[torch.Tensor], directions: Sequence[torch.Tensor],
            eps: float, *more_eps: float) -> list[torch.Tensor] | list[list[torch.Tensor]]:
    """``(f(x + eps u) - f(x - eps u)) / 2 eps`` for each output; with more
    steps, one such list per step."""
    leaves, directions = _prepare(leaves, directions)
    out = []
    for e in (eps, *more_eps):
        plus, minus = _at(f, leaves, directions, e), _at(f, leaves, directions, -e)
        out.append([(p - m) / (2 * e) for p, m in zip(plus, minus)])
    return out if more_eps else out[0]


def one_sided(f: Callable, leaves: Sequence[torch.Tensor], directions: Sequence[torch.Tensor],
              eps: float) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Right and left differences; where they disagree, ``f`` has a kink at x."""
    leaves, directions = _prepare(leaves, directions)
    mid = _at(f, leaves, directions, 0.0)
    plus, minus = _at(f, leaves, directions, eps), _at(f, leaves, directions, -eps)
    return ([(p - c) / eps for p, c in zip(plus, mid)],
            [(c - m) / eps for c, m in zip(mid, minus)])
