"""gradgrad: second derivatives against finite differences of the first.

With ``h(x) = <J(x)^T v, w>``, reverse-over-reverse ``<grad h, u>`` and
forward-over-reverse (the tangent of ``J^T v`` along ``u``, contracted with
``w``) must both equal ``(h(x + eps u) - h(x - eps u)) / 2 eps``, where ``h`` is
evaluated by first-order autograd in float64. In low precision, where an
identity holds in float64 on the same values, the second derivative itself is
judged against its float64 value (fuzzdiff.confirm.low_precision.against_float64).

The three computations are torch-only functions of ``f``, its leaves and the
probes, which the standalone script copies (``script`` below).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.autograd.forward_ad as fwAD

from fuzzdiff.case.case import Case
from fuzzdiff.case.directions import absdot, directions, dot, probes_like
from fuzzdiff.checks.check import Check, Cost, OpInfoRole, probe_params
from fuzzdiff.checks.fragment import Fragment, ScriptContext, lines
from fuzzdiff.checks.grad import DENSE_PROBE, kink_pairs, point_out_of_range
from fuzzdiff.confirm.identities import Measurement, judge, judged, worst
from fuzzdiff.confirm.stopping import stopping_rule
from fuzzdiff.confirm.tolerance import tolerance
from fuzzdiff.guards.unsupported import refuse_once_differentiable
from fuzzdiff.paths.forward import same_layout
from fuzzdiff.paths.function import LeafFunction, leaf_function
from fuzzdiff.paths.numerical import ROUNDOFF64, one_sided_differences
from fuzzdiff.paths.reverse import first_derivative, vjp
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict

__all__ = ["CHECK", "reverse_over_reverse", "forward_over_reverse", "first_derivative_difference"]

Function = Callable[..., Sequence[torch.Tensor]]


def differentiable_vjp(f: Function, leaves: Sequence[torch.Tensor], v: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """``J^T v`` with its graph kept. As gradgradcheck does, the cotangent
    requires grad: a backward marked once_differentiable then leaves its error
    node in the graph, which ``refuse_once_differentiable`` finds (torch reads
    its second derivative as zero, in gradgradcheck too, rather than raise)."""
    outs = f(*leaves)
    return vjp(outs, leaves, [t.detach().to(o.dtype).requires_grad_() for t, o in zip(v, outs)], create_graph=True)


def reverse_over_reverse(
    f: Function, leaves: Sequence[torch.Tensor], v: Sequence[torch.Tensor], u: Sequence[torch.Tensor], w
) -> tuple[float, float]:
    """``<grad h, u>`` for ``h = <J^T v, w>``, and its scale."""
    g = differentiable_vjp(f, leaves, v)
    h = sum((gi * wi.to(gi.dtype)).sum() for gi, wi in zip(g, w) if gi.requires_grad)
    if not isinstance(h, torch.Tensor) or not h.requires_grad:
        grad_h = [torch.zeros_like(l) for l in leaves]
    else:
        refuse_once_differentiable(h)
        grad_h = vjp([h], leaves, [torch.ones_like(h)])
    return dot(grad_h, u), absdot(grad_h, u)


def forward_over_reverse(
    f: Function, leaves: Sequence[torch.Tensor], v: Sequence[torch.Tensor], u: Sequence[torch.Tensor], w
) -> tuple[float, float]:
    """The tangent of ``J^T v`` along ``u``, contracted with ``w``, and its scale."""
    with fwAD.dual_level():
        duals = [fwAD.make_dual(l, same_layout(l, ui)) for l, ui in zip(leaves, u)]
        g = differentiable_vjp(f, duals, v)
        refuse_once_differentiable(*g)
        tangents = []
        for gi in g:
            t = fwAD.unpack_dual(gi).tangent
            tangents.append(torch.zeros_like(gi) if t is None else t.detach())
    return dot(tangents, w), absdot(tangents, w)


def first_derivative_difference(
    f: Function, leaves64: Sequence[torch.Tensor], v64: Sequence[torch.Tensor], u, w, eps: float
) -> tuple[float, float]:
    """``(h(x + eps u) - h(x - eps u)) / 2 eps`` for ``h = <J^T v, w>`` at the
    float64 ``leaves64``, and its error estimate (the change when the step
    doubles, plus round-off)."""

    def h(step: float) -> tuple[float, float]:
        moved = [(l.detach() + step * ui.to(l.dtype)).requires_grad_() for l, ui in zip(leaves64, u)]
        g = vjp(f(*moved), moved, v64)
        return dot(g, w), absdot(g, w)

    (p1, s), (m1, _) = h(eps), h(-eps)
    (p2, _), (m2, _) = h(2 * eps), h(-2 * eps)
    n1, n2 = (p1 - m1) / (2 * eps), (p2 - m2) / (4 * eps)
    return n1, abs(n1 - n2) + ROUNDOFF64 / eps * s


Analytic = Callable[[Function, Sequence[torch.Tensor], Sequence[torch.Tensor], Sequence[torch.Tensor], object], tuple]


def first_derivative_finite(f: LeafFunction, case: Case) -> bool:
    """The outputs and ``J^T v`` are finite at the case's point: else there is no
    second derivative to check (``x / x`` at 0 is nan there, 1 an eps away)."""
    outs = f(*f.leaves)
    g = vjp(outs, f.leaves, probes_like(case.params, "cotangent", outs))
    return all(bool(torch.isfinite(t).all()) for t in (*outs, *g))


def _measure(analytic: Analytic):
    def measure(target: Target, case: Case, eps: float, cast=None) -> Measurement:
        f = leaf_function(target, case, cast=cast)
        u = directions(case.params, f.leaves)
        w = probes_like(case.params, "second", f.leaves)
        value, scale = analytic(f, f.leaves, _cotangents(case, f), u, w)
        ref = leaf_function(target, case, cast=torch.float64)
        numeric, noise = first_derivative_difference(ref, ref.leaves, _cotangents(case, ref), u, w, eps)
        # asked only when the second derivative is not finite
        defined = math.isfinite(value) or first_derivative_finite(f, case)
        return Measurement(value, numeric, scale + abs(numeric), noise, defined)

    return measure


def kinks(target: Target, case: Case, eps: float, finite: bool = False) -> Iterator[tuple[str, float, float, float]]:
    """fuzzdiff.confirm.steps.kink's pairs at a structured point, for a second
    derivative: the kinks of the first derivative ``J^T v`` along u, seen
    through w, in float64. An exact zero inside cumprod is no kink of it (a
    nan there is a bug); the norm at zero is. And a jump of the outputs
    themselves along u, seen through v: where f switches branch exactly at
    the point (torch.linalg.qr at a diagonal input), ``J^T v`` may stay
    continuous while its derivative at the point is the point's own branch's."""
    ref = leaf_function(target, case, cast=torch.float64, requires_grad=False)
    u = directions(case.params, ref.leaves)
    w = probes_like(case.params, "second", ref.leaves)
    v = _cotangents(case, ref)
    with torch.no_grad():
        dense = probes_like({"cotangent": DENSE_PROBE}, "cotangent", ref(*ref.leaves))
    # the outputs' own jump first: the cheapest pair, the first derivative's pairs cost more
    yield ("right and left derivatives of the outputs along u", *one_sided_differences(ref, ref.leaves, u, v, eps))
    yield from kink_pairs(
        first_derivative(ref, v), ref.leaves, w, u, eps, seen_whole=first_derivative(ref, dense), finite=finite
    )


def _cotangents(case: Case, f) -> list[torch.Tensor]:
    with torch.no_grad():
        return probes_like(case.params, "cotangent", f(*f.leaves))


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
            sided=lambda c, eps, finite: kinks(target, c, eps, finite),
            second_order=True,
            point_out_of_range=lambda c: point_out_of_range(target, c, second_order=True),
            stopping=lambda c: stopping_rule(target, c),
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


def script(ctx: ScriptContext) -> Fragment:
    return Fragment(
        "second derivatives (reverse over reverse, forward over reverse) vs finite differences of the first",
        lines(
            "# h(x) = <J(x)^T v, w>: the first derivative contracted with a second probe w.",
            "# Central differences of h in float64, h by first-order reverse mode.",
            "x64 = make_leaves(torch.float64)",
            "numeric, noise = first_derivative_difference(f, x64, V64, U, W, EPS)",
            "results = []",
            "for identity, second_derivative in (",
            f'    ("reverse over reverse ({ctx.dtype}) vs finite differences of J^T v", reverse_over_reverse),',
            f'    ("forward over reverse ({ctx.dtype}) vs finite differences of J^T v", forward_over_reverse),',
            "):",
            "    try:",
            "        analytic, scale = second_derivative(f, make_leaves(), V, U, W)",
            "    except Unsupported as e:  # no double backward: nothing to compare",
            '        print(f"{identity}: unsupported ({e})")',
            "        continue",
            "    except (NotImplementedError, RuntimeError) as e:",
            "        skip_missing_formula(identity, e)",
            "        continue",
            "    results.append(judge(identity, analytic, numeric, scale + abs(numeric), noise))",
            "return finish(results)",
        ),
        ("f", "judge", "skip_missing_formula", "finish"),
        ("V", "V64", "U", "W"),
        forward_ad=True,
        copies=(first_derivative_difference, reverse_over_reverse, forward_over_reverse),
    )


CHECK = Check(
    "gradgrad",
    run,
    params=probe_params("cotangent", "direction", "second"),
    script=script,
    cost=Cost(0.036, 0.0063),
    opinfo=OpInfoRole(
        flags=("supports_gradgrad",),
        tests=(("TestBwdGradients", "test_fn_gradgrad"), ("TestGradients", "test_fn_gradgrad")),
    ),
)
