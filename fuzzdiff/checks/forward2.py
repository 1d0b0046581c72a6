"""forward2: second derivatives with forward mode in them, against finite differences.

With a cotangent ``w`` (output-shaped) and two directions ``u``, ``u'``
(leaf-shaped), ``<w, d2f[u, u']>`` is computed by forward-over-forward
(``torch.func.jvp`` of ``torch.func.jvp``), reverse-over-forward (the gradient
of the forward-mode ``<w, J u>``), forward-over-reverse and
reverse-over-reverse, and for a scalar function of a few values also by
``torch.func.hessian``, ``jacfwd(jacfwd)`` and ``jacrev(jacrev)`` contracted
with ``(u, u')``. Each is judged on its own against central differences along
``u'`` of the first derivative ``<J^T w, u>`` in float64, so that an identity
torch cannot compute (no jvp, a backward marked once_differentiable) leaves
the others judged. In low precision each is judged against float64 too
(fuzzdiff.confirm.low_precision.against_float64).

Nested ``torch.func.jvp`` through a custom ``autograd.Function`` returns zero
second derivatives (pytorch/pytorch#197867, docs/pages/discrepancies.md): for such targets
forward-over-forward and ``jacfwd(jacfwd)`` name the Function in their identity, so
that a Known singles them out, and are judged last, after reverse-over-forward
has judged the Function's ``jvp``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.autograd.forward_ad as fwAD

from fuzzdiff.case.case import Case
from fuzzdiff.case.directions import absdot, dot, probes_like
from fuzzdiff.checks.check import Check, CiSample, Cost, OpInfoRole, probe_params
from fuzzdiff.checks.fragment import Fragment, ScriptContext, lines
from fuzzdiff.checks.grad import DENSE_PROBE, kink_pairs, point_out_of_range
from fuzzdiff.checks.gradgrad import first_derivative_finite
from fuzzdiff.confirm.identities import Measurement, judge, judged, worst
from fuzzdiff.confirm.stopping import stopping_rule
from fuzzdiff.confirm.tolerance import tolerance
from fuzzdiff.guards.unsupported import ONCE_DIFFERENTIABLE, refuse_once_differentiable, through_once_differentiable
from fuzzdiff.paths.forward import NO_FORWARD_RULE, library_ops, same_layout
from fuzzdiff.paths.function import leaf_function
from fuzzdiff.paths.numerical import directional_difference, one_sided_differences
from fuzzdiff.paths.reverse import first_derivative, vjp
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict

__all__ = [
    "CHECK",
    "forward_over_forward",
    "reverse_over_forward",
    "forward_over_reverse",
    "reverse_over_reverse",
    "by_jacobians",
    "second_difference",
    "along_stride0",
]

Tensors = Sequence[torch.Tensor]
LeafFn = Callable[..., Sequence[torch.Tensor]]

SMALL = 16  # the most leaf elements for which full Hessians are built
JACOBIANS = ("hessian", "jacfwd(jacfwd)", "jacrev(jacrev)")
# the identities built on nested torch.func.jvp, which reads a custom
# autograd.Function's second derivatives as zero (pytorch/pytorch#197867)
NESTED_JVP = ("forward-over-forward", "jacfwd(jacfwd)")
# the identities that differentiate a backward (hessian is jacfwd(jacrev)):
# through one marked once_differentiable they would read zero
THROUGH_BACKWARD = ("forward-over-reverse", "reverse-over-reverse", "hessian", "jacrev(jacrev)")

MODULE_IN_TRANSFORM = (
    "a module target builds its module in every call, here inside a torch.func transform, which "
    "refuses Module.to's `.data` writes and its initialization's random calls; the dual-number "
    "identities run"
)

RANDOM_IN_VMAP = (
    "the target draws random numbers, and torch.func's jacobians run it under vmap, which refuses "
    "random ops (or has no batching rule for them, rrelu)"
)

# -- the computations, torch-only (a standalone script runs these very functions) ------


def along_stride0(leaves: Tensors, probes: Tensors) -> list[torch.Tensor]:
    """Each probe made constant along its leaf's stride-0 dims, where forward
    mode can attach a tangent (the directions of a stride-0 leaf stay so)."""
    out = []
    for p, leaf in zip(probes, leaves):
        for d, (n, s) in enumerate(zip(leaf.shape, leaf.stride())):
            if s == 0 and n > 1:
                p = p.narrow(d, 0, 1).expand_as(p)
        out.append(p)
    return out


def forward_over_forward(f: LeafFn, leaves: Tensors, u: Tensors, u2: Tensors, w: Tensors) -> tuple[float, float]:
    """``<w, d2f[u, u']>`` by torch.func.jvp along u' of torch.func.jvp along u, and its scale."""
    inner = tuple(same_layout(l, d) for l, d in zip(leaves, u))

    def tangents(*x):
        return torch.func.jvp(lambda *y: tuple(f(*y)), x, inner)[1]

    outer = tuple(same_layout(l, d) for l, d in zip(leaves, u2))
    second = torch.func.jvp(tangents, tuple(l.detach() for l in leaves), outer)[1]
    return dot(w, second), absdot(w, second)


def reverse_over_forward(f: LeafFn, leaves: Tensors, u: Tensors, u2: Tensors, w: Tensors) -> tuple[float, float]:
    """``<grad <w, J u>, u'>``: reverse mode through forward mode's ``J u``
    (leaves that require grad), which differentiates the jvp formulas themselves."""
    with fwAD.dual_level():
        duals = [fwAD.make_dual(l, same_layout(l, d)) for l, d in zip(leaves, u)]
        outs = f(*duals)
        tangents = []
        for o in outs:
            t = fwAD.unpack_dual(o).tangent
            tangents.append(torch.zeros_like(o) if t is None else t)
    grads = vjp(tangents, leaves, [wi.to(t.dtype) for wi, t in zip(w, tangents)])
    return dot(grads, u2), absdot(grads, u2)


def forward_over_reverse(f: LeafFn, leaves: Tensors, u: Tensors, u2: Tensors, w: Tensors) -> tuple[float, float]:
    """``<u, D_u' (J^T w)>``: forward mode along u' through reverse mode's ``J^T w``."""
    with fwAD.dual_level():
        duals = [fwAD.make_dual(l, same_layout(l, d)) for l, d in zip(leaves, u2)]
        # a cotangent that requires grad, as gradgradcheck's: see reverse_over_reverse
        grads = vjp(f(*duals), duals, [wi.detach().requires_grad_() for wi in w], create_graph=True)
        refuse_once_differentiable(*grads)
        tangents = []
        for g in grads:
            t = fwAD.unpack_dual(g).tangent
            tangents.append(torch.zeros_like(g) if t is None else t.detach())
    return dot(u, tangents), absdot(u, tangents)


def reverse_over_reverse(f: LeafFn, leaves: Tensors, u: Tensors, u2: Tensors, w: Tensors) -> tuple[float, float]:
    """``<grad <J^T w, u>, u'>``: reverse mode twice (leaves that require grad)."""
    # A cotangent that requires grad makes a backward marked once_differentiable
    # leave its error node in the graph, where the refusal finds it: torch
    # would read its second derivative as zero.
    grads = vjp(f(*leaves), leaves, [wi.detach().requires_grad_() for wi in w], create_graph=True)
    refuse_once_differentiable(*grads)
    h = sum((g * d.to(g.dtype)).sum() for g, d in zip(grads, u) if g.requires_grad)
    if isinstance(h, torch.Tensor) and h.requires_grad:
        second = vjp([h], leaves, [torch.ones_like(h)])
    else:
        second = [torch.zeros_like(l) for l in leaves]
    return dot(second, u2), absdot(second, u2)


def by_jacobians(how: str, f: LeafFn, leaves: Tensors, u: Tensors, u2: Tensors, w: Tensors) -> tuple[float, float]:
    """``w u^T H u'`` for a function with one output of one element, its full
    Hessian built by torch.func: ``how`` is "hessian", "jacfwd(jacfwd)" or "jacrev(jacrev)"."""
    transforms = {
        "hessian": torch.func.hessian,
        "jacfwd(jacfwd)": lambda g, argnums: torch.func.jacfwd(torch.func.jacfwd(g, argnums), argnums),
        "jacrev(jacrev)": lambda g, argnums: torch.func.jacrev(torch.func.jacrev(g, argnums), argnums),
    }

    def scalar(*x):
        return f(*x)[0].reshape(())

    n = len(leaves)
    blocks = transforms[how](scalar, tuple(range(n)))(*[l.detach() for l in leaves])
    weight = w[0].reshape(()).to(torch.float64)
    total, scale = 0.0, 0.0
    for i in range(n):
        for j in range(n):
            a, b = u[i].to(torch.float64), u2[j].to(torch.float64)
            pair = a.reshape(a.shape + (1,) * b.dim()) * b
            block = blocks[i][j].detach().to(torch.float64)
            total += float((block * pair).sum() * weight)
            scale += float((block.abs() * pair.abs()).sum() * weight.abs())
    return total, scale


def second_difference(
    f: LeafFn, leaves: Tensors, u: Tensors, u2: Tensors, w: Tensors, eps: float
) -> tuple[float, float]:
    """``<w, d2f[u, u']>`` by central differences along u' of ``<J^T w, u>``
    (reverse mode, at float64 ``leaves``), and an estimate of their error."""

    return directional_difference(first_derivative(f, w), leaves, u2, u, eps)


# -- the check: thin adapters from a Case ----------------------------------------------

Path = Callable[[LeafFn, Tensors, Tensors, Tensors, Tensors], tuple[float, float]]
PATHS: dict[str, Path] = {
    "forward-over-forward": forward_over_forward,
    "reverse-over-forward": reverse_over_forward,
    "forward-over-reverse": forward_over_reverse,
    "reverse-over-reverse": reverse_over_reverse,
}
# the paths that need leaves that require grad
NEEDS_GRAD = frozenset({"reverse-over-forward", "forward-over-reverse", "reverse-over-reverse"})


def _identity(name: str, through_function: bool = False) -> str:
    if through_function and name in NESTED_JVP:
        return f"<w, d2f[u, u']> {name} through a custom autograd.Function vs finite differences"
    return f"<w, d2f[u, u']> {name} vs finite differences"


def _probes(case: Case, leaves: Tensors, outs: Tensors):
    u = along_stride0(leaves, probes_like(case.params, "direction", leaves))
    u2 = along_stride0(leaves, probes_like(case.params, "second", leaves))
    return u, u2, probes_like(case.params, "cotangent", outs)


def _analytic(target: Target, case: Case, name: str, cast=None):
    """The identity's analytic side and scale, and the probes it used."""
    f = leaf_function(target, case, cast=cast, requires_grad=name in NEEDS_GRAD)
    with torch.no_grad():
        outs = f(*[l.detach() for l in f.leaves])
    u, u2, w = _probes(case, f.leaves, outs)
    if name in PATHS:
        return *PATHS[name](f, f.leaves, u, u2, w), (u, u2, w)
    return *by_jacobians(name, f, f.leaves, u, u2, w), (u, u2, w)


def _kinks(target: Target, case: Case, eps: float, finite: bool = False) -> Iterator[tuple[str, float, float, float]]:
    """fuzzdiff.confirm.steps.kink's pairs at a structured point: the kinks of the
    first derivative ``J^T w`` along u', seen through u, in float64, and a
    jump of the outputs themselves along u', seen through w (gradgrad.kinks:
    a function that switches branch exactly at the point)."""
    ref = leaf_function(target, case, cast=torch.float64, requires_grad=False)
    with torch.no_grad():
        outs = ref(*ref.leaves)
    u, u2, w = _probes(case, ref.leaves, outs)
    dense = probes_like({"cotangent": DENSE_PROBE}, "cotangent", outs)
    # the outputs' own jump first: the cheapest pair, the first derivative's pairs cost more
    yield ("right and left derivatives of the outputs along u'", *one_sided_differences(ref, ref.leaves, u2, w, eps))
    yield from kink_pairs(
        first_derivative(ref, w), ref.leaves, u, u2, eps, seen_whole=first_derivative(ref, dense), finite=finite
    )


def _reference(target: Target, case: Case, eps: float, probes) -> tuple[float, float]:
    """The finite differences in float64 at the case's values, at the very probes (widened)."""
    ref = leaf_function(target, case, cast=torch.float64, requires_grad=False)
    u, u2, w = probes
    return second_difference(ref, ref.leaves, u, u2, w, eps)


@dataclass(frozen=True)
class _Refusals:
    """Why an identity cannot be computed at a target, by path name, and
    whether a custom autograd.Function is in its graph."""

    why: dict[str, str]
    through_function: bool = False

    @classmethod
    def at(cls, target: Target, case: Case) -> _Refusals:
        f = leaf_function(target, case)
        why: dict[str, str] = {}
        ops = library_ops(f, f.leaves)
        if ops:
            no_rule = NO_FORWARD_RULE.format(ops=", ".join(sorted(ops)))
            why.update(dict.fromkeys(("forward-over-forward", "reverse-over-forward", "jacfwd(jacfwd)"), no_rule))
        if target.module is not None:
            why.update(dict.fromkeys(("forward-over-forward", *JACOBIANS), MODULE_IN_TRANSFORM))
        if target.random:
            why.update(dict.fromkeys(JACOBIANS, RANDOM_IN_VMAP))
        outs = f(*f.leaves)
        try:
            grads = vjp(
                outs, f.leaves, [v.requires_grad_() for v in probes_like({}, "cotangent", outs)], create_graph=True
            )
        except Exception:  # noqa: BLE001 - the reverse identities meet it again, and are judged there
            grads = []
        if through_once_differentiable(*grads):
            why.update(dict.fromkeys(THROUGH_BACKWARD, ONCE_DIFFERENTIABLE))
        n = sum(l.numel() for l in f.leaves)
        real = all(t.dtype.is_floating_point for t in (*outs, *f.leaves))
        if not (len(outs) == 1 and outs[0].numel() == 1 and n <= SMALL and real):
            small = f"Hessians are built for one real output of one element and at most {SMALL} real leaf elements"
            why.update(dict.fromkeys(JACOBIANS, small))
        elif n == 0:
            # nothing to judge, and vmap over an empty basis trips some batching rules
            why.update(dict.fromkeys(JACOBIANS, "no leaf elements: the Hessian is empty"))
        elif any(0 in l.stride() for l in f.leaves):
            why.update(dict.fromkeys(JACOBIANS, "torch.func's jacobians write a full basis into a stride-0 leaf"))
        without_jvp = _functions_without_jvp(outs)
        if without_jvp:
            # torch says so for nested jvp and hessian, but jacfwd(jacfwd) fails an
            # internal assert instead ("flat_bdims must not be None")
            no_jvp = f"custom autograd.Function(s) {', '.join(without_jvp)} define no jvp: no forward mode"
            why.update(
                dict.fromkeys(("forward-over-forward", "reverse-over-forward", "jacfwd(jacfwd)", "hessian"), no_jvp)
            )
        return cls(why, _calls_function(outs))

    def identity(self, name: str) -> str:
        return _identity(name, self.through_function)

    def paths(self) -> list[str]:
        return [p for p in (*PATHS, *JACOBIANS) if p not in self.why]


def _stage(name: str) -> int:
    """When the identity is judged: 0 for those that differentiate no jvp
    formula, 1 for reverse over forward (which differentiates them), 2 for
    nested torch.func.jvp (which differentiates them, and reads a custom
    Function's second derivatives as zero)."""
    return 2 if name in NESTED_JVP else 1 if name == "reverse-over-forward" else 0


def _calls_function(outs: Tensors) -> bool:
    """Whether a custom autograd.Function is in the graph of ``outs``."""
    seen, stack = set(), [o.grad_fn for o in outs]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            return True
        stack.extend(n for n, _ in node.next_functions)
    return False


def _functions_without_jvp(outs: Tensors) -> list[str]:
    """The custom autograd.Functions in the graph of ``outs`` that define no jvp."""
    seen, stack, out = set(), [o.grad_fn for o in outs], []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        forward_cls = getattr(node, "_forward_cls", None)
        if forward_cls is not None and forward_cls.jvp is torch.autograd.function._SingleLevelFunction.jvp:
            out.append(forward_cls.__name__)
        stack.extend(n for n, _ in node.next_functions)
    return sorted(set(out))


def run(target: Target, case: Case) -> Verdict:
    dtype = case.torch_dtype
    tol = tolerance(target, "forward2", dtype)
    low = dtype != torch.float64
    refusals = _Refusals.at(target, case)
    references: dict[tuple, tuple[Case, tuple[float, float]]] = {}

    def reference(c: Case, eps: float, cast, probes) -> tuple[float, float]:
        # Shared by every identity: the probes are a function of the case and
        # the cast. (The case is kept, so that its id stays its own.)
        key = (id(c), eps, cast)
        if key not in references:
            references[key] = (c, _reference(target, c, eps, probes))
        return references[key][1]

    def measure(name: str, cast=None) -> Callable[[Case, float], Measurement]:
        def m(c: Case, eps: float) -> Measurement:
            analytic, scale, probes = _analytic(target, c, name, cast)
            numeric, noise = reference(c, eps, cast, probes)
            # asked only when the second derivative or the reference's round-off
            # (taken from the first derivative at the point) is not finite: a
            # function or first derivative that is not finite here has none to
            # check (gradgrad's rule), whatever the analytic side reads (nested
            # jvp reads 0 through a clamp of nan)
            defined = (math.isfinite(analytic) and not math.isnan(noise)) or first_derivative_finite(
                leaf_function(target, c, cast=cast), c
            )
            return Measurement(analytic, numeric, scale + abs(numeric), noise, defined)

        return m

    def identity(name: str) -> Callable[[], Verdict]:
        return lambda: judge(
            refusals.identity(name),
            measure(name),
            case,
            tol,
            measure64=measure(name, torch.float64) if low else None,
            sided=lambda c, eps, finite: _kinks(target, c, eps, finite),
            second_order=True,
            point_out_of_range=lambda c: point_out_of_range(target, c, second_order=True),
            stopping=lambda c: stopping_rule(target, c),
        )

    # Judged one by one: a custom Function without jvp still has its reverse
    # identities judged, a refused identity says why. Stage by stage
    # (_stage), each only when the ones before pass: a known torch bug in a
    # jvp formula or in nested jvp (fuzzdiff.targets.known), wrong value or
    # exception, never hides a failure of an identity judged before it.
    refused = [Verdict("unsupported", f"{refusals.identity(name)}: {why}") for name, why in refusals.why.items()]
    verdicts: list[Verdict] = []
    for stage in range(3):
        paths = [name for name in refusals.paths() if _stage(name) == stage]
        verdicts += [judged(refusals.identity(name), identity(name)) for name in paths]
        if any(v.kind == "fail" for v in verdicts):
            break
    return worst(*verdicts, *refused)


# -- the standalone script ---------------------------------------------------------------


def script(ctx: ScriptContext) -> Fragment:
    # a crash record's case killed its process: the script tries every path
    crashed = getattr(ctx, "crashed", False)
    try:
        refusals = None if crashed else _Refusals.at(ctx.target, ctx.case)
    except Exception:  # noqa: BLE001 - the function raises at the case: every path is tried, and raises as it
        refusals = None
    # in the check's order (_stage): the first MISMATCH is the one it reports
    paths = sorted([*PATHS, *JACOBIANS] if refusals is None else refusals.paths(), key=_stage)
    identity = _identity if refusals is None else refusals.identity
    calls = []
    for name in paths:
        leaves = "make_leaves()" if name in NEEDS_GRAD else "make_leaves(requires_grad=False)"
        fn = f"{PATHS[name].__name__}(f, " if name in PATHS else f"by_jacobians({name!r}, f, "
        calls += [
            "try:",
            f"    leaves = {leaves}",
            f"    analytic, scale = {fn}leaves, U, along_stride0(leaves, W), V)",
            f"    results.append(judge({identity(name)!r},",
            "                         analytic, reference, scale + abs(reference), noise))",
        ]
        if name in ("forward-over-reverse", "reverse-over-reverse"):  # they refuse a once_differentiable backward
            calls += ["except Unsupported as e:", f'    print(f"{name}: unsupported ({{e}})")']
        calls += [
            "except (NotImplementedError, RuntimeError) as e:",
            f"    skip_missing_formula({name!r}, e)",
        ]
    copies: list[Callable[..., Any]] = [along_stride0, second_difference]
    copies += [PATHS[p] for p in paths if p in PATHS]
    if any(p in JACOBIANS for p in paths):
        copies.append(by_jacobians)
    return Fragment(
        "second derivatives <w, d2f[u, u']> with forward mode (forward over forward, reverse over "
        "forward, forward over reverse) and reverse over reverse vs finite differences of the first",
        lines(
            "# w: V, one per output; u: U and u': W, one per leaf (u' constant along stride-0 dims).",
            "# Central differences along u' of <J^T w, u> (reverse mode) in float64 at the same values.",
            "x64 = make_leaves(torch.float64, requires_grad=False)",
            "reference, noise = second_difference(f, x64, U, along_stride0(x64, W), V, EPS)",
            "results = []",
            *calls,
            "return finish(results)",
        ),
        helpers=("f", "judge", "skip_missing_formula", "finish"),
        probes=("V", "U", "W"),
        forward_ad=True,
        copies=tuple(copies),
    )


CHECK = Check(
    "forward2",
    run,
    params=probe_params("cotangent", "direction", "second"),
    script=script,
    # up to eleven second derivatives per example, each a ladder climb: every
    # catalog target would cost CI some twenty minutes
    ci=CiSample(targets=40, max_examples=8),
    cost=Cost(0.084, 0.0144),
    opinfo=OpInfoRole(
        flags=("supports_forward_ad", "supports_fwgrad_bwgrad"),
        tests=(
            ("TestFwdGradients", "test_fn_fwgrad_bwgrad"),
            ("TestGradients", "test_fn_fwgrad_bwgrad"),
            ("TestFwdGradients", "test_forward_mode_AD"),
        ),
    ),
)
