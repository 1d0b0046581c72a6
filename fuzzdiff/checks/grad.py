"""grad: reverse mode against central finite differences.

``<J^T v, u>`` from autograd, with a random non-unit cotangent ``v``, against
``<v, (f(x + eps u) - f(x - eps u)) / 2 eps>`` in float64 at the same values.
"""

from __future__ import annotations

import torch

from fuzzdiff.case import Case
from fuzzdiff.checks.check import Check
from fuzzdiff.confirm import Measurement, judge
from fuzzdiff.directions import absdot, directions, dot, dot_and_scale, probes_like
from fuzzdiff.paths.function import leaf_function
from fuzzdiff.paths.numerical import central
from fuzzdiff.paths.reverse import vjp
from fuzzdiff.targets.target import Target
from fuzzdiff.tolerance import tolerance
from fuzzdiff.verdict import Verdict

ROUNDOFF64 = 2.0**-52


def finite_difference(target: Target, case: Case, cotangents, u, eps: float, storages=None):
    """``<v, J u>`` by central differences in float64, and an estimate of its error."""
    ref = leaf_function(target, case, cast=torch.float64, requires_grad=False, storages=storages)
    with torch.no_grad():
        outs = ref(*ref.leaves)
    d1, d2 = central(ref, ref.leaves, u, eps, 2 * eps)
    n1, n2 = dot(cotangents, d1), dot(cotangents, d2)
    # Truncation: the step-doubling difference; round-off: eps_mach * |f| / eps.
    noise = abs(n1 - n2) + ROUNDOFF64 / eps * absdot(cotangents, outs)
    return n1, noise


def reverse_dot(target: Target, case: Case, cast=None, storages=None):
    f = leaf_function(target, case, cast=cast, storages=storages)
    outs = f(*f.leaves)
    v = probes_like(case.params, "cotangent", outs)
    grads = vjp(outs, f.leaves, v)
    u = directions(case.params, f.leaves)
    return *dot_and_scale(grads, u), v, u


def measure(target: Target, case: Case, eps: float, cast=None) -> Measurement:
    storages = case.storages()
    # The analytic side gets copies: a target that (wrongly) writes into its
    # inputs must not move the finite-difference reference to another point,
    # which would report a mutation as a wrong derivative.
    copies = {i: t.clone() for i, t in storages.items()}
    analytic, scale, v, u = reverse_dot(target, case, cast, copies)
    numeric, noise = finite_difference(target, case, v, u, eps, storages)
    return Measurement(analytic, numeric, scale + abs(numeric), noise)


def run(target: Target, case: Case) -> Verdict:
    dtype = case.torch_dtype
    return judge("<J^T v, u> vs finite differences",
                 lambda c, eps: measure(target, c, eps), case, tolerance(target, "grad", dtype),
                 measure64=None if dtype == torch.float64 else
                 lambda c, eps: measure(target, c, eps, cast=torch.float64))


CHECK = Check("grad", run, doc=__doc__)
