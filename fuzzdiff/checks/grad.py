"""grad: reverse mode against central finite differences.

``<J^T v, u>`` from autograd, with a random non-unit cotangent ``v``, against
``<v, (f(x + eps u) - f(x - eps u)) / 2 eps>`` in float64 at the same values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import torch
from torch.utils._pytree import tree_leaves

from fuzzdiff.case import draws
from fuzzdiff.case.case import Case
from fuzzdiff.case.directions import absdot, directions, dot, dot_and_scale, probes_like
from fuzzdiff.case.materialize import Inputs
from fuzzdiff.checks.check import Check, Cost, OpInfoRole
from fuzzdiff.checks.fragment import Fragment, ScriptContext, lines
from fuzzdiff.confirm.compare import out_of_range
from fuzzdiff.confirm.identities import EPS, Measurement, judge
from fuzzdiff.confirm.steps import DENSE_COTANGENT
from fuzzdiff.confirm.stopping import stopping_rule
from fuzzdiff.confirm.tolerance import tolerance
from fuzzdiff.paths.function import differentiable
from fuzzdiff.paths.numerical import (
    ROUNDOFF64,
    central_differences,
    directional_difference,
    one_sided_differences,
    second_differences,
    split_differences,
)
from fuzzdiff.paths.reverse import first_derivative, vjp
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict


def _outputs(target: Target, case: Case, args) -> tuple[torch.Tensor, ...]:
    """The target's floating outputs at ``args`` (LeafFunction.call_args, inlined)."""
    out = target.fn(*args, **case.kwargs)
    if type(out) is torch.Tensor:  # the common case: no pytree walk
        return (out,) if differentiable(out) else ()
    return tuple(t for t in tree_leaves(out) if differentiable(t))


def _of_leaves(target: Target, case: Case, at: Inputs) -> Callable[..., tuple[torch.Tensor, ...]]:
    """The target's floating outputs as a function of ``at``'s leaves, the rest of its inputs held."""
    rebuild = at.rebuild
    return lambda *leaves: _outputs(target, case, rebuild(list(leaves)))


def finite_difference(target: Target, case: Case, cotangents, u, eps: float, storages=None, at: Inputs | None = None):
    """``<v, J u>`` by central differences in float64 at the case's values
    (paths.numerical), and an estimate of its error.

    ``storages``: the case's storages, unwritten since they were drawn (cast
    to float64 here); by default they are drawn here. ``at``: the float64
    inputs themselves, when the caller has them already.
    """
    if at is None:
        at = case.materialize(requires_grad=False, cast=torch.float64, storages=storages)
    return directional_difference(_of_leaves(target, case, at), at.leaves, u, cotangents, eps)


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
APART = "through the check's cotangent with its entries drawn apart"


def one_sided(
    target: Target, case: Case, eps: float, finite: bool = False
) -> Iterator[tuple[str, float, float, float]]:
    """fuzzdiff.confirm.steps.kink's pairs at a structured point, for ``<v, J u>``:
    the kinks of the target's outputs at the case's values, in float64."""
    at = case.materialize(requires_grad=False, cast=torch.float64)
    f = _of_leaves(target, case, at)

    with torch.no_grad():
        outs = f(*at.leaves)
        v = probes_like(case.params, "cotangent", outs)
        dense_v = probes_like(_DENSE_COTANGENT, "cotangent", outs)
    u = directions(case.params, at.leaves)
    yield _jump(f, at.leaves, u, dense_v, eps, outs)
    yield from kink_pairs(f, at.leaves, v, u, eps, finite=finite)


def _jump(
    f: Callable[..., Sequence[torch.Tensor]],
    leaves: Sequence[torch.Tensor],
    u: Sequence[torch.Tensor],
    dense_v: Sequence[torch.Tensor],
    eps: float,
    outs: Sequence[torch.Tensor],
) -> tuple[str, float, float, float]:
    """The outputs' own jump at the point, seen through a dense cotangent: the
    right and left differences along u times eps, which a jump keeps apart at
    every eps and a kink or a smooth point brings together as eps shrinks. A
    function that switches branch exactly at the point (torch.linalg.qr at a
    diagonal input: no reflection there, one at every neighbour) has no
    derivative there, whatever outputs the check's cotangent sees."""
    right, left, noise = one_sided_differences(f, leaves, u, dense_v, eps, outs=outs)
    return ("the outputs' values either side of the point along u (a jump)", eps * right, eps * left, eps * noise)


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
    the mismatch is seen through counts; but those outputs are also weighed
    apart (APART: random values where ``v`` is not zero), since a kink where
    one output takes over from its neighbour cancels out of a cotangent that
    weighs them alike. The pairs marked DENSE_COTANGENT
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
        # v's own outputs, weighed apart: a constant cotangent hides a kink where one output
        # takes over from its neighbour (two clamps at their bounds at once: rtdl's piecewise
        # linear encoding at a bin edge), and the analytic side is a convention there
        apart = [
            torch.where(t != 0, d, torch.zeros_like(d))
            for t, d in zip(v, probes_like(_DENSE_COTANGENT, "cotangent", at))
        ]
    dense_u = directions(_DENSE, leaves)
    walks = [("u", f, at, u, v), ("a dense direction", f, at, dense_u, v)]
    if not finite:
        whole = f if seen_whole is None else seen_whole
        with torch.no_grad():
            whole_at = at if seen_whole is None else whole(*leaves)
            dense_v = probes_like(_DENSE_COTANGENT, "cotangent", whole_at)
        walks.append((f"a dense direction {DENSE_COTANGENT}", whole, whole_at, dense_u, dense_v))
    sided_walks = [*walks[:2], (f"u, {APART}", f, at, u, apart), *walks[2:]]
    for along, g, g_at, d, through in sided_walks:
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


# The step of point_out_of_range's second differences: their rounding errs by
# eps_mach / step**2 of |f|, their truncation by step**2 (a magnitude is asked of them).
SECOND_STEP = 1e-4
# point_out_of_range's derivatives are taken of the outputs times this (a power
# of two: exact), so that those beyond float64's own range are seen, finite.
SCALED = 2.0**-64


def point_out_of_range(target: Target, case: Case, second_order: bool = False) -> str | None:
    """Where the case's point leaves its dtype's finite range: the first of
    its outputs and derivatives along the case's probes, in float64, that
    the dtype cannot hold (fuzzdiff.confirm.compare.out_of_range), or None. They are
    what a derivative computed in the dtype is made of: the outputs,
    ``J^T v``, ``J u`` and ``J w`` (v the cotangent, u the direction, w the
    second probe), and with ``second_order`` the derivatives of ``J^T v``
    along u and w and ``d2f[u, w]``. One beyond the range overflows there,
    and that infinity times a zero probe entry is nan where the derivative
    asked is finite. The derivatives are taken of the outputs times SCALED,
    so that a float64 case's are seen past float64's range too. Made lazily,
    in that order: the first one found ends it. Where the function raises a
    step away, nothing is known (None): the verdict stays what it was."""
    dtype = case.torch_dtype
    at = case.materialize(requires_grad=False, cast=torch.float64)
    f = _of_leaves(target, case, at)

    def small(*leaves: torch.Tensor) -> list[torch.Tensor]:
        return [o * SCALED for o in f(*leaves)]

    leaves = at.leaves
    with torch.no_grad():
        outs = f(*leaves)
    v = [p * SCALED for p in probes_like(case.params, "cotangent", outs)]
    u, w = directions(case.params, leaves), probes_like(case.params, "second", leaves)
    grad = first_derivative(f, v)

    def named(what: str, tensors: Sequence[torch.Tensor], of: str) -> tuple[list[str], Sequence[torch.Tensor]]:
        return [f"{what} ({of} {k})" for k in range(len(tensors))], tensors

    def scaled() -> Iterator[tuple[list[str], Sequence[torch.Tensor]]]:
        yield named("J^T v", grad(*leaves), "leaf")
        yield named("J u", central_differences(small, leaves, u, EPS), "output")
        yield named("J w", central_differences(small, leaves, w, EPS), "output")
        if second_order:
            yield named("J^T v along u", central_differences(grad, leaves, u, EPS), "leaf")
            yield named("J^T v along w", central_differences(grad, leaves, w, EPS), "leaf")
            yield named("d2f[u, w]", second_differences(small, leaves, u, w, SECOND_STEP), "output")

    found = out_of_range([f"output {k}" for k in range(len(outs))], outs, dtype)
    try:
        for names, tensors in () if found else scaled():
            found = out_of_range(names, tensors, dtype, SCALED)
            if found:
                break
    except Exception:  # noqa: BLE001 - a step away the function raises: the point's range is unknown
        return None
    return found


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
    low = case.torch_dtype != torch.float64
    return judge(
        "<J^T v, u> vs finite differences",
        lambda c, eps: measure(target, c, eps),
        case,
        tolerance(target, "grad", case.torch_dtype),
        measure64=(lambda c, eps: measure(target, c, eps, cast=torch.float64)) if low else None,
        sided=lambda c, eps, finite: one_sided(target, c, eps, finite),
        point_out_of_range=lambda c: point_out_of_range(target, c),
        stopping=lambda c: stopping_rule(target, c),
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


CHECK = Check(
    "grad",
    run,
    script=script,
    cost=Cost(0.015, 0.0027),
    opinfo=OpInfoRole(tests=(("TestBwdGradients", "test_fn_grad"), ("TestGradients", "test_fn_grad"))),
)
