"""grad: reverse mode against central finite differences.

``<J^T v, u>`` from autograd, with a random non-unit cotangent ``v``, against
``<v, (f(x + eps u) - f(x - eps u)) / 2 eps>`` in float64 at the same values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import torch
from torch.utils._pytree import tree_leaves

from fuzzdiff import draws
from fuzzdiff.case import Case
from fuzzdiff.checks.check import Check
from fuzzdiff.confirm import Measurement, judge
from fuzzdiff.directions import absdot, directions, dot, dot_and_scale, probes_like
from fuzzdiff.fragment import Fragment, ScriptContext, lines
from fuzzdiff.materialize import Inputs
from fuzzdiff.paths.function import differentiable
from fuzzdiff.paths.numerical import ROUNDOFF64, directional_difference, one_sided_differences, split_differences
from fuzzdiff.paths.reverse import vjp
from fuzzdiff.steps import DENSE_COTANGENT
from fuzzdiff.targets.target import Target
from fuzzdiff.tolerance import tolerance
from fuzzdiff.verdict import Verdict


def _outputs(target: Target, case: Case, args) -> tuple[torch.Tensor, ...]:
    """The target's floating outputs at ``args`` (LeafFunction.call_args, inlined)."""
    out = target.fn(*args, **case.kwargs)
    if type(out) is torch.Tensor:  # the common case: no pytree walk
        return (out,) if differentiable(out) else ()
    return tuple(t for t in tree_leaves(out) if differentiable(t))


def finite_difference(target: Target, case: Case, cotangents, u, eps: float, storages=None, at: Inputs | None = None):
    """``<v, J u>`` by central differences in float64 at the case's values
    (paths.numerical), and an estimate of its error.

    ``storages``: the case's storages, unwritten since they were drawn (cast
    to float64 here); by default they are drawn here. ``at``: the float64
    inputs themselves, when the caller has them already.
    """
    if at is None:
        at = case.materialize(requires_grad=False, cast=torch.float64, storages=storages)
    rebuild = at.rebuild
    return directional_difference(
        lambda *leaves: _outputs(target, case, rebuild(list(leaves))), at.leaves, u, cotangents, eps
    )


_SPLIT_SEED = 0x5EED
# random splits of u in the kink test: a tied pair stays whole in each with chance 1/2, so a
# kink of a tie goes unseen with chance 2**-SPLITS (it is asked only at a structured point
# where a mismatch was found)
SPLITS = 12
# The kink test also looks along a direction with no zero entry: u leaves about half the
# entries still, and a kink among those alone is invisible along u (the median of three tied
# values moved along one of them is flat on both sides, and linear along any split of u).
_DENSE = {"direction": {"seed": 0xD1CE, "layout": "contiguous", "zeros": 0.0}}
# and, where the analytic side is nan (which reaches every output), through a dense cotangent
DENSE_PROBE = {"seed": 0xC0DE, "layout": "contiguous", "zeros": 0.0}
_DENSE_COTANGENT = {"cotangent": DENSE_PROBE}


def one_sided(
    target: Target, case: Case, eps: float, finite: bool = False
) -> Iterator[tuple[str, float, float, float]]:
    """fuzzdiff.steps.kink's pairs at a structured point, for ``<v, J u>``:
    the kinks of the target's outputs at the case's values, in float64."""
    at = case.materialize(requires_grad=False, cast=torch.float64)
    rebuild = at.rebuild

    def f(*leaves: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return _outputs(target, case, rebuild(list(leaves)))

    with torch.no_grad():
        v = probes_like(case.params, "cotangent", f(*at.leaves))
    return kink_pairs(f, at.leaves, v, directions(case.params, at.leaves), eps, finite=finite)


def _split(k: int, leaves: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The ``k``-th random 0/1 split of a direction on ``leaves``."""
    return [
        torch.from_numpy(draws.bits(draws.words(_SPLIT_SEED + 16 * k + j, l.numel(), draws.NUDGES)).astype("float64"))
        .reshape(l.shape)
        .to(l.device)
        for j, l in enumerate(leaves)
    ]


def kink_pairs(
    f: Callable[..., Sequence[torch.Tensor]],
    leaves: Sequence[torch.Tensor],
    v: Sequence[torch.Tensor],
    u: Sequence[torch.Tensor],
    eps: float,
    seen_whole: Callable[..., Sequence[torch.Tensor]] | None = None,
    finite: bool = False,
) -> Iterator[tuple[str, float, float, float]]:
    """Pairs of derivatives of ``f`` at ``leaves``, seen through the cotangent
    ``v``, that agree wherever ``f`` is differentiable: along the check's own
    direction u and along a dense one, the right and left derivatives, and the
    derivative against its sum along random splits of the direction
    (paths.numerical). ``v`` is the check's own, so only a kink in the outputs
    the mismatch is seen through counts; the pairs marked DENSE_COTANGENT
    look at ``seen_whole`` (``f`` itself by default, or a first derivative
    built with a dense cotangent of its own) through a dense cotangent, for an
    analytic side that is nan (a nan reaches every output): none of those
    where the analytic side is ``finite``.

    Lazily, the cheap pairs first: the test stops at the first kink, and on a
    slow function (an ODE solve, a second derivative) each pair costs four
    to eight of its calls. ``f`` at the point and the derivative along each
    whole direction are taken once and shared by every pair that needs them."""
    with torch.no_grad():
        at = f(*leaves)
    dense_u = directions(_DENSE, leaves)
    walks = [("u", f, at, u, v), ("a dense direction", f, at, dense_u, v)]
    if not finite:
        whole = f if seen_whole is None else seen_whole
        with torch.no_grad():
            whole_at = at if seen_whole is None else whole(*leaves)
            dense_v = probes_like(_DENSE_COTANGENT, "cotangent", whole_at)
        walks.append((f"a dense direction {DENSE_COTANGENT}", whole, whole_at, dense_u, dense_v))
    for along, g, g_at, d, through in walks:
        yield (
            f"right and left derivatives along {along}",
            *one_sided_differences(g, leaves, d, through, eps, outs=g_at),
        )
    splits: list[list[torch.Tensor]] = []  # drawn as first needed, then shared by every walk
    for along, g, g_at, d, through in walks:
        along_d = directional_difference(g, leaves, d, through, eps, outs=g_at)
        for k in range(SPLITS):
            if k == len(splits):
                splits.append(_split(k, leaves))
            yield (
                f"the derivative along {along} and its sum along a split of it",
                *split_differences(g, leaves, d, through, eps, splits[k], whole=along_d, outs=g_at),
            )


def _reverse(target: Target, case: Case, cast, storages):
    inputs = case.materialize(cast=cast, storages=storages)
    leaves = inputs.leaves
    outs = _outputs(target, case, inputs.args)
    v = probes_like(case.params, "cotangent", outs)
    grads = vjp(outs, leaves, v)
    u = directions(case.params, leaves)
    return *dot_and_scale(grads, u), v, u, inputs, outs, grads


def reverse_dot(target: Target, case: Case, cast=None, storages=None):
    """``<J^T v, u>``, its scale ``<|J^T v|, |u|>``, and the probes ``v`` and ``u``."""
    return _reverse(target, case, cast, storages)[:4]


def measure(target: Target, case: Case, eps: float, cast=None) -> Measurement:
    storages = case.storages()
    versions = [t._version for t in storages.values()]
    analytic, scale, v, u, inputs, outs, grads = _reverse(target, case, cast, storages)
    # asked only when the gradient is not finite: a check per output costs time on every example
    defined = math.isfinite(analytic) or all(bool(torch.isfinite(o).all()) for o in outs)
    at = None
    if any(t._version != n for t, n in zip(storages.values(), versions)):
        # The target wrote into its inputs (the mutation check's finding): the
        # finite differences start from freshly drawn values, the same ones,
        # so that a mutation is never reported as a wrong derivative.
        storages = case.storages()
    elif cast is None and inputs.leaves and all(l.dtype is torch.float64 for l in inputs.leaves):
        # Already the float64 point, on the storages just checked: its leaves,
        # detached, without a second materialize(). (A cast copy is not checked:
        # the finite differences cast the untouched storages again.)
        at = Inputs(inputs.args, [l.detach() for l in inputs.leaves], inputs.rebuild, inputs.sources)
    elif cast is None:
        at = case.recast(inputs, torch.float64)  # the leaves just checked, cast, where the case allows
    numeric, noise = finite_difference(target, case, v, u, eps, storages, at)
    if case.structured:
        # Large or shifted values: x + eps u rounds at |x|'s ulp, which moves the
        # finite differences by up to <|J^T v|, |x|> eps_mach / eps.
        noise += ROUNDOFF64 / eps * absdot(grads, inputs.leaves)
    return Measurement(analytic, numeric, scale + abs(numeric), noise, defined)


def run(target: Target, case: Case) -> Verdict:
    dtype = case.torch_dtype
    return judge(
        "<J^T v, u> vs finite differences",
        lambda c, eps: measure(target, c, eps),
        case,
        tolerance(target, "grad", dtype),
        measure64=None if dtype == torch.float64 else lambda c, eps: measure(target, c, eps, cast=torch.float64),
        sided=lambda c, eps, finite: one_sided(target, c, eps, finite),
    )


def script(ctx: ScriptContext) -> Fragment:
    return Fragment(
        "reverse mode <J^T v, u> vs finite differences <v, J u> in float64",
        lines(
            f"# Reverse mode in {ctx.dtype}: <J^T v, u>.",
            "leaves = make_leaves()",
            "grads = vjp(f(*leaves), leaves, V)",
            "analytic, scale = dot(grads, U), absdot(grads, U)",
            "# Central finite differences in float64 at the same values: <v, J u>.",
            "numeric, noise = finite_difference(V, U)",
            'return finish([judge("<J^T v, u> (reverse mode) vs finite differences",',
            "                     analytic, numeric, scale + abs(numeric), noise)])",
        ),
        ("f", "finite_difference", "judge", "finish"),
        ("V", "U"),
        copies=(vjp, dot, absdot),
    )


CHECK = Check("grad", run, script=script)
