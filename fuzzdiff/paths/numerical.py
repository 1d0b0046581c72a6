"""Finite differences: ``<v, J u>`` by central differences, with an estimate of
their own error. Torch-only, so that a standalone script runs this very
function (fuzzdiff.script.helpers copies it by source)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from fuzzdiff.case.directions import absdot, dot, widened

__all__ = [
    "directional_difference",
    "one_sided_differences",
    "split_differences",
    "central_differences",
    "second_differences",
    "ROUNDOFF64",
]

ROUNDOFF64 = 2.0**-52  # float64's unit roundoff, doubled: the round-off of one difference


def directional_difference(
    f: Callable[..., Sequence[torch.Tensor]],
    leaves: Sequence[torch.Tensor],
    directions: Sequence[torch.Tensor],
    cotangents: Sequence[torch.Tensor],
    eps: float,
    outs: Sequence[torch.Tensor] | None = None,
) -> tuple[float, float]:
    """``<v, J u>`` of ``f`` at ``leaves`` along ``directions`` by central
    differences of step ``eps``, and its error: truncation (the change when the
    step doubles) plus round-off (``eps_mach * |f| / eps``). ``outs``: ``f``
    at ``leaves``, where the caller has it (the kink test asks many
    directions at one point)."""
    us = [d if d.dtype == l.dtype else d.to(l.dtype) for l, d in zip(leaves, directions)]
    # Every point is built before f runs at any of them: a function that
    # (wrongly) writes into its inputs cannot move the others.
    points = [[torch.add(l, d, alpha=h) for l, d in zip(leaves, us)] for h in (eps, -eps, 2 * eps, -2 * eps)]
    # torch.no_grad(), at a fifth of its cost: once per example of the grad check
    grad = torch.is_grad_enabled()
    torch._C._set_grad_enabled(False)
    try:
        if outs is None:
            outs = f(*leaves)
        plus, minus, plus2, minus2 = [f(*p) for p in points]
    finally:
        torch._C._set_grad_enabled(grad)
    d1 = [(p - m) / (2 * eps) for p, m in zip(plus, minus)]
    d2 = [(p - m) / (4 * eps) for p, m in zip(plus2, minus2)]
    v = widened(cotangents)  # once, not once per dot product
    n1, n2 = dot(v, d1), dot(v, d2)
    return n1, abs(n1 - n2) + ROUNDOFF64 / eps * absdot(v, outs)


def one_sided_differences(
    f: Callable[..., Sequence[torch.Tensor]],
    leaves: Sequence[torch.Tensor],
    directions: Sequence[torch.Tensor],
    cotangents: Sequence[torch.Tensor],
    eps: float,
    outs: Sequence[torch.Tensor] | None = None,
) -> tuple[float, float, float]:
    """``<v, (f(x + eps u) - f(x)) / eps>`` and ``<v, (f(x) - f(x - eps u)) / eps>``:
    the right and the left derivative of ``f`` at ``leaves`` along
    ``directions``, and their round-off. Where ``f`` is smooth they differ by
    ``eps <v, f'' u u>``, which shrinks with ``eps``; at a kink they differ by
    the jump of the derivative, whatever ``eps``."""
    us = [d if d.dtype == l.dtype else d.to(l.dtype) for l, d in zip(leaves, directions)]
    points = [[torch.add(l, d, alpha=h) for l, d in zip(leaves, us)] for h in (eps, -eps)]
    with torch.no_grad():
        if outs is None:
            outs = f(*leaves)
        plus, minus = [f(*p) for p in points]
        right = [(p - o) / eps for p, o in zip(plus, outs)]
        left = [(o - m) / eps for o, m in zip(outs, minus)]
    v = widened(cotangents)
    return dot(v, right), dot(v, left), 2 * ROUNDOFF64 / eps * absdot(v, outs)


def split_differences(
    f: Callable[..., Sequence[torch.Tensor]],
    leaves: Sequence[torch.Tensor],
    directions: Sequence[torch.Tensor],
    cotangents: Sequence[torch.Tensor],
    eps: float,
    masks: Sequence[torch.Tensor],
    whole: tuple[float, float] | None = None,
    outs: Sequence[torch.Tensor] | None = None,
) -> tuple[float, float, float]:
    """``<v, D_u f>`` and ``<v, D_{u m} f> + <v, D_{u (1 - m)} f>`` by central
    differences, for 0/1 ``masks`` m, and their error: equal where ``f`` is
    differentiable (its derivative is linear in u). At a kink whose
    one-sided derivatives agree (the median of three tied values, an odd
    function of u) they differ. ``whole``: ``directional_difference`` along
    ``directions`` already, and ``outs``, ``f`` at ``leaves``: the same for
    every split of one direction."""
    parts = [[d * m for d, m in zip(directions, masks)], [d * (1 - m) for d, m in zip(directions, masks)]]
    along, noise = directional_difference(f, leaves, directions, cotangents, eps, outs) if whole is None else whole
    (a, na), (b, nb) = [directional_difference(f, leaves, p, cotangents, eps, outs) for p in parts]
    return along, a + b, noise + na + nb


def central_differences(
    f: Callable[..., Sequence[torch.Tensor]],
    leaves: Sequence[torch.Tensor],
    directions: Sequence[torch.Tensor],
    eps: float,
) -> list[torch.Tensor]:
    """``(f(x + eps u) - f(x - eps u)) / 2 eps`` for each output of ``f``:
    the derivative ``J u`` itself, not contracted with a cotangent."""
    us = [d if d.dtype == l.dtype else d.to(l.dtype) for l, d in zip(leaves, directions)]
    points = [[torch.add(l, d, alpha=h) for l, d in zip(leaves, us)] for h in (eps, -eps)]
    with torch.no_grad():
        plus, minus = [f(*p) for p in points]
    return [(p - m) / (2 * eps) for p, m in zip(plus, minus)]


def second_differences(
    f: Callable[..., Sequence[torch.Tensor]],
    leaves: Sequence[torch.Tensor],
    u: Sequence[torch.Tensor],
    w: Sequence[torch.Tensor],
    eps: float,
) -> list[torch.Tensor]:
    """``d2f[u, w]`` for each output of ``f``, by the four-point difference
    ``(f(x + eps (u + w)) - f(x + eps (u - w)) - f(x - eps (u - w)) + f(x - eps (u + w))) / 4 eps^2``."""
    us = [d if d.dtype == l.dtype else d.to(l.dtype) for l, d in zip(leaves, u)]
    ws = [d if d.dtype == l.dtype else d.to(l.dtype) for l, d in zip(leaves, w)]
    steps = ((1, 1), (1, -1), (-1, 1), (-1, -1))
    points = [[l + eps * (a * ui + b * wi) for l, ui, wi in zip(leaves, us, ws)] for a, b in steps]
    with torch.no_grad():
        pp, pm, mp, mm = [f(*p) for p in points]
    return [(a - b - c + d) / (4 * eps * eps) for a, b, c, d in zip(pp, pm, mp, mm)]
