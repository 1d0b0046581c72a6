"""grad: reverse mode against central finite differences.

``<J^T v, u>`` from autograd, with a random non-unit cotangent ``v``, against
``<v, (f(x + eps u) - f(x - eps u)) / 2 eps>`` in float64 at the same values.
"""

from __future__ import annotations

import torch
from torch.utils._pytree import tree_leaves

from fuzzdiff.case import Case
from fuzzdiff.checks.check import Check
from fuzzdiff.confirm import Measurement, judge
from fuzzdiff.directions import absdot, directions, dot, dot_and_scale, probes_like, widened
from fuzzdiff.paths.function import differentiable
from fuzzdiff.paths.reverse import vjp
from fuzzdiff.targets.target import Target
from fuzzdiff.tolerance import tolerance
from fuzzdiff.verdict import Verdict

ROUNDOFF64 = 2.0**-52


def _outputs(target: Target, case: Case, args) -> tuple[torch.Tensor, ...]:
    """The target's floating outputs at ``args`` (LeafFunction.call_args, inlined)."""
    out = target.fn(*args, **case.kwargs)
    if isinstance(out, torch.Tensor):  # the common case: no pytree walk
        return (out,) if differentiable(out) else ()
    return tuple(t for t in tree_leaves(out) if differentiable(t))


def finite_difference(target: Target, case: Case, cotangents, u, eps: float, storages=None):
    """``<v, J u>`` by central differences in float64, and an estimate of its error.

    ``storages``: float64 (or already copied) storages to evaluate at; by
    default the case's values are drawn and cast here.
    """
    ref = case.materialize(requires_grad=False, cast=torch.float64, storages=storages)
    leaves, rebuild = ref.leaves, ref.rebuild
    us = [d if d.dtype == l.dtype else d.to(l.dtype) for l, d in zip(leaves, u)]
    with torch.no_grad():
        outs = _outputs(target, case, rebuild(leaves))
        diffs = []
        for e in (eps, 2 * eps):
            plus = _outputs(target, case, rebuild([torch.add(l, d, alpha=e) for l, d in zip(leaves, us)]))
            minus = _outputs(target, case, rebuild([torch.add(l, d, alpha=-e) for l, d in zip(leaves, us)]))
            diffs.append([(p - m) / (2 * e) for p, m in zip(plus, minus)])
    d1, d2 = diffs
    v = widened(cotangents)  # once, not once per dot product
    n1, n2 = dot(v, d1), dot(v, d2)
    # Truncation: the step-doubling difference; round-off: eps_mach * |f| / eps.
    noise = abs(n1 - n2) + ROUNDOFF64 / eps * absdot(v, outs)
    return n1, noise


def reverse_dot(target: Target, case: Case, cast=None, storages=None):
    inputs = case.materialize(cast=cast, storages=storages)
    leaves = inputs.leaves
    outs = _outputs(target, case, inputs.args)
    v = probes_like(case.params, "cotangent", outs)
    grads = vjp(outs, leaves, v)
    u = directions(case.params, leaves)
    return *dot_and_scale(grads, u), v, u


def _reference(case: Case, storages: dict) -> dict:
    """The float64 reference's own storages, made before the analytic side runs:
    a target that (wrongly) writes into its inputs must not move the
    finite-difference reference to another point, which would report a
    mutation as a wrong derivative. One copy per storage: the cast when there
    is one (exactly ``materialize(cast=float64)``'s), else a clone."""
    args = case.args
    return {i: t.to(torch.float64) if args[i].dtype is None and t.dtype != torch.float64 else t.clone()
            for i, t in storages.items()}


def measure(target: Target, case: Case, eps: float, cast=None) -> Measurement:
    storages = case.storages()
    reference = _reference(case, storages)
    analytic, scale, v, u = reverse_dot(target, case, cast, storages)
    numeric, noise = finite_difference(target, case, v, u, eps, reference)
    return Measurement(analytic, numeric, scale + abs(numeric), noise)


def run(target: Target, case: Case) -> Verdict:
    dtype = case.torch_dtype
    return judge("<J^T v, u> vs finite differences",
                 lambda c, eps: measure(target, c, eps), case, tolerance(target, "grad", dtype),
                 measure64=None if dtype == torch.float64 else
                 lambda c, eps: measure(target, c, eps, cast=torch.float64))


CHECK = Check("grad", run, doc=__doc__)
