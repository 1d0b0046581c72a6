"""gradgrad: second derivatives against finite differences of the first.

With ``h(x) = <J(x)^T v, w>``, reverse-over-reverse ``<grad h, u>`` and
forward-over-reverse (the tangent of ``J^T v`` along ``u``, contracted with
``w``) must both equal ``(h(x + eps u) - h(x - eps u)) / 2 eps``, where ``h`` is
evaluated by first-order autograd in float64. In low precision, where an
identity holds in float64 on the same values, the second derivative itself is
judged against its float64 value (fuzzdiff.confirm.against_float64).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.autograd.forward_ad as fwAD

from fuzzdiff.case import Case
from fuzzdiff.checks.check import Check, probe_params
from fuzzdiff.confirm import Measurement, judge, judged, worst
from fuzzdiff.directions import absdot, directions, dot, probes_like
from fuzzdiff.paths.forward import same_layout
from fuzzdiff.paths.function import LeafFunction, leaf_function
from fuzzdiff.paths.numerical import ROUNDOFF64
from fuzzdiff.paths.reverse import vjp
from fuzzdiff.targets.target import Target
from fuzzdiff.tolerance import tolerance
from fuzzdiff.verdict import Unsupported, Verdict


def _first_derivative(f: LeafFunction, leaves, params, create_graph: bool):
    outs = f(*leaves)
    v = probes_like(params, "cotangent", outs)
    if create_graph:
        # As gradgradcheck does: a cotangent that requires grad makes a
        # backward marked once_differentiable raise instead of silently
        # returning a constant (whose derivative would read as zero).
        v = [t.requires_grad_() for t in v]
    return vjp(outs, leaves, v, create_graph=create_graph), v


def refuse_once_differentiable(t: torch.Tensor) -> None:
    """Raise Unsupported if ``t``'s graph passes through a backward marked
    once_differentiable: its error node hangs off detached copies, so autograd
    would silently read its second derivative as zero rather than raise."""
    seen, stack = set(), [t.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if type(node).__name__ in ("Error", "DelayedError"):
            raise Unsupported("a backward is marked @once_differentiable: no double backward")
        stack.extend(n for n, _ in node.next_functions)


def reverse_over_reverse(target: Target, case: Case, cast=None):
    f = leaf_function(target, case, cast=cast)
    g, _ = _first_derivative(f, f.leaves, case.params, create_graph=True)
    w = probes_like(case.params, "second", f.leaves)
    u = directions(case.params, f.leaves)
    h = sum((gi * wi.to(gi.dtype)).sum() for gi, wi in zip(g, w) if gi.requires_grad)
    if not isinstance(h, torch.Tensor) or not h.requires_grad:
        grad_h = [torch.zeros_like(l) for l in f.leaves]
    else:
        refuse_once_differentiable(h)
        grad_h = vjp([h], f.leaves, [torch.ones_like(h)])
    return dot(grad_h, u), absdot(grad_h, u), u, w


def forward_over_reverse(target: Target, case: Case, cast=None):
    f = leaf_function(target, case, cast=cast)
    u = directions(case.params, f.leaves)
    w = probes_like(case.params, "second", f.leaves)
    with fwAD.dual_level():
        duals = [fwAD.make_dual(l, same_layout(l, ui)) for l, ui in zip(f.leaves, u)]
        g, _ = _first_derivative(f, duals, case.params, create_graph=True)
        for gi in g:
            refuse_once_differentiable(gi)
        tangents = []
        for gi in g:
            t = fwAD.unpack_dual(gi).tangent
            tangents.append(torch.zeros_like(gi) if t is None else t.detach())
    return dot(tangents, w), absdot(tangents, w), u, w


def first_derivative_difference(target: Target, case: Case, u, w, eps: float):
    """``(h(x + eps u) - h(x - eps u)) / 2 eps`` in float64, and its error estimate."""
    ref = leaf_function(target, case, cast=torch.float64)

    def h(step: float) -> tuple[float, float]:
        moved = [(l.detach() + step * ui.to(l.dtype)).requires_grad_() for l, ui in zip(ref.leaves, u)]
        g, _ = _first_derivative(ref, moved, case.params, create_graph=False)
        return dot(g, w), absdot(g, w)

    (p1, s), (m1, _) = h(eps), h(-eps)
    (p2, _), (m2, _) = h(2 * eps), h(-2 * eps)
    n1, n2 = (p1 - m1) / (2 * eps), (p2 - m2) / (4 * eps)
    return n1, abs(n1 - n2) + ROUNDOFF64 / eps * s


def first_derivative_finite(target: Target, case: Case, cast=None) -> bool:
    """The outputs and ``J^T v`` are finite at the case's point: else there is no
    second derivative to check (``x / x`` at 0 is nan there, 1 an eps away)."""
    f = leaf_function(target, case, cast=cast)
    outs = f(*f.leaves)
    g, _ = _first_derivative(f, f.leaves, case.params, create_graph=False)
    return all(bool(torch.isfinite(t).all()) for t in (*outs, *g))


def _measure(analytic_fn):
    def measure(target: Target, case: Case, eps: float, cast=None) -> Measurement:
        analytic, scale, u, w = analytic_fn(target, case, cast)
        numeric, noise = first_derivative_difference(target, case, u, w, eps)
        # asked only when the second derivative is not finite
        defined = math.isfinite(analytic) or first_derivative_finite(target, case, cast)
        return Measurement(analytic, numeric, scale + abs(numeric), noise, defined)

    return measure


rr, fr = _measure(reverse_over_reverse), _measure(forward_over_reverse)


def run(target: Target, case: Case) -> Verdict:
    dtype = case.torch_dtype
    tol = tolerance(target, "gradgrad", dtype)
    low = dtype != torch.float64

    def identity(name: str, m: Callable[..., Measurement]) -> Callable[[], Verdict]:
        return lambda: judge(
            name,
            lambda c, eps: m(target, c, eps),
            case,
            tol,
            measure64=(lambda c, eps: m(target, c, eps, torch.float64)) if low else None,
        )

    # Judged one by one: a custom Function without jvp still has its
    # reverse-over-reverse derivative checked.
    return worst(
        *(
            judged(name, identity(name, m))
            for name, m in (
                ("reverse-over-reverse vs finite differences of J^T v", rr),
                ("forward-over-reverse vs finite differences of J^T v", fr),
            )
        )
    )


CHECK = Check("gradgrad", run, params=probe_params("cotangent", "direction", "second"))
