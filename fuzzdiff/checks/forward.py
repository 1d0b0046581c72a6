"""forward: forward mode against reverse mode and against finite differences.

``<v, J u>`` from dual numbers must equal ``<J^T v, u>`` from autograd (the
dot-product identity, exact up to rounding) and ``<v, D_u f>`` by central
differences in float64. In low precision, where both hold in float64 on the
same values, ``<v, J u>`` itself is judged against its float64 value
(fuzzdiff.confirm.low_precision.against_float64): a tangent wrong only in float32 fails.
At an output that is not finite the tangent is inf * 0 wherever u is zero:
no derivative to check, as in grad; where the point's values or derivatives
leave the dtype's range (float64's own included), it is out of range.
"""

from __future__ import annotations

import math

import torch

from fuzzdiff.case.case import Case
from fuzzdiff.case.directions import absdot, directions, dot, probes_like
from fuzzdiff.checks.check import Check, Cost, OpInfoRole
from fuzzdiff.checks.fragment import Fragment, ScriptContext, lines
from fuzzdiff.checks.grad import finite_difference, one_sided, point_out_of_range, reverse_dot
from fuzzdiff.confirm.identities import Measurement, judge, worst
from fuzzdiff.confirm.stopping import stopping_rule
from fuzzdiff.confirm.tolerance import tolerance
from fuzzdiff.paths.forward import jvp
from fuzzdiff.paths.function import leaf_function
from fuzzdiff.paths.reverse import vjp
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict


def forward_dot(target: Target, case: Case, cast=None):
    """``<v, J u>`` by forward mode, its scale, the probes, and whether the
    function's outputs are finite (asked only where ``<v, J u>`` is not: at an
    infinite output its tangent is inf * 0 wherever u is zero, grad's rule)."""
    f = leaf_function(target, case, cast=cast, requires_grad=False)
    u = directions(case.params, f.leaves)
    outs, tangents = jvp(f, f.leaves, u)
    v = probes_like(case.params, "cotangent", outs)
    value = dot(v, tangents)
    defined = math.isfinite(value) or all(bool(torch.isfinite(o).all()) for o in outs)
    return value, absdot(v, tangents), v, u, defined


def vs_reverse(target: Target, case: Case, eps: float, cast=None) -> Measurement:
    fwd, fscale, _, _, defined = forward_dot(target, case, cast)
    rev, rscale, _, _ = reverse_dot(target, case, cast)
    return Measurement(fwd, rev, fscale + rscale, defined=defined)


def vs_numeric(target: Target, case: Case, eps: float, cast=None) -> Measurement:
    fwd, scale, v, u, defined = forward_dot(target, case, cast)
    numeric, noise = finite_difference(target, case, v, u, eps)
    return Measurement(fwd, numeric, scale + abs(numeric), noise, defined)


def run(target: Target, case: Case) -> Verdict:
    dtype = case.torch_dtype
    tol = tolerance(target, "forward", dtype)
    low = dtype != torch.float64

    def beyond(c: Case) -> str | None:
        return point_out_of_range(target, c)

    return worst(
        judge(
            "<v, J u> (forward) vs <J^T v, u> (reverse)",
            lambda c, eps: vs_reverse(target, c, eps),
            case,
            tol,
            measure64=(lambda c, eps: vs_reverse(target, c, eps, torch.float64)) if low else None,
            # the function's one-sided differences say whether a structured point is a kink,
            # for this identity too: where it is not, the neighbours keep the structure
            sided=lambda c, eps, finite: one_sided(target, c, eps, finite),
            point_out_of_range=beyond,
            # no stopping step: a solver's tolerance moves the function as computed, which
            # finite differences see, not one of two derivative rules at the same root
        ),
        judge(
            "<v, J u> (forward) vs finite differences",
            lambda c, eps: vs_numeric(target, c, eps),
            case,
            tol,
            measure64=(lambda c, eps: vs_numeric(target, c, eps, torch.float64)) if low else None,
            sided=lambda c, eps, finite: one_sided(target, c, eps, finite),
            point_out_of_range=beyond,
            stopping=lambda c: stopping_rule(target, c),
        ),
    )


def script(ctx: ScriptContext) -> Fragment:
    return Fragment(
        "forward-mode <v, J u> vs reverse-mode <J^T v, u> and vs finite differences",
        lines(
            f"# Forward mode in {ctx.dtype}: <v, J u> from dual tensors.",
            "_, tangents = jvp(f, make_leaves(requires_grad=False), U)",
            "forward, forward_scale = dot(V, tangents), absdot(V, tangents)",
            "# Reverse mode: <J^T v, u>.",
            "leaves = make_leaves()",
            "grads = vjp(f(*leaves), leaves, V)",
            "reverse, reverse_scale = dot(grads, U), absdot(grads, U)",
            "# Central finite differences in float64 at the same values.",
            "numeric, noise = finite_difference(V, U)",
            "return finish([",
            '    judge("<v, J u> (forward mode) vs <J^T v, u> (reverse mode)",',
            "          forward, reverse, forward_scale + reverse_scale),",
            '    judge("<v, J u> (forward mode) vs finite differences",',
            "          forward, numeric, forward_scale + abs(numeric), noise),",
            "])",
        ),
        ("f", "finite_difference", "judge", "finish"),
        ("V", "U"),
        forward_ad=True,
        copies=(jvp, vjp, dot, absdot),
    )


CHECK = Check(
    "forward",
    run,
    script=script,
    cost=Cost(0.021, 0.0036),
    opinfo=OpInfoRole(
        flags=("supports_forward_ad",),
        tests=(("TestFwdGradients", "test_forward_mode_AD"), ("TestGradients", "test_forward_mode_AD")),
    ),
)
