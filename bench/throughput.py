"""Throughput of fuzzdiff's derivative checks against bare torch loops doing the same work.

For each check of ``--checks`` (grad, forward2, gradgrad, vmap, compile):

fuzzdiff side: ``fuzzdiff.fuzzing.fuzz(check, op)`` with a fixed number of
examples per op (Hypothesis derandomized, no database), over a fixed mix of
catalog ops. Every example is a drawn Case (shapes, layout, aliasing, values,
probes, the check's own draws), materialized and pushed through
``fuzzdiff.runner.run_check``. The compile check draws its backend from
aot_eager alone (``FuzzConfig.compile_backends``), the backend its bare loop
compiles with.

bare side: the same ops, shapes drawn with ``torch.randint`` and values with
``torch.rand``, and per example the torch calls the check makes on a
contiguous unaliased case, neither more nor fewer; each ``bare_<check>``
function says which. For grad: the forward pass, ``torch.autograd.grad`` with a
random non-unit cotangent, the direction cast to the input dtype,
``<J^T v, u>`` and its scale in one pass, the float64 finite-difference forward
evaluations at ``x``, ``x +- eps u`` and ``x +- 2 eps u`` (one ``torch.add``
each), and the dot products with the cotangent widened once. No Hypothesis, no
Case, no layouts or junk memory, no copy of the inputs for the reference, no
confirmation logic.

The ratio fuzzdiff/bare is the framework's efficiency. grad is the headline
figure, with a target of >= 0.5 and a breakdown of where the fuzzdiff side's
time goes; the other checks' ratios are informational, and where a check
draws more kinds of work than its bare loop makes (vmap's compositions,
compile's transforms), lower for that too. An example of theirs costs 4 to 12
grad examples, so they run fewer (``--examples-costly``).

    python bench/throughput.py                      # grad: 200 examples per op and side; the others 10
    python bench/throughput.py --checks grad        # the grad check alone
    python bench/throughput.py --checks forward2 vmap --examples-costly 50
    python bench/throughput.py --examples 500
    python bench/throughput.py --seconds 60         # each check: repeat rounds for about a minute
    python bench/throughput.py --max-side 64        # larger tensors: torch dominates more
    python bench/throughput.py --profile out.prof   # cProfile the first check's fuzzdiff side
    python bench/throughput.py --clock process      # CPU time: steadier on a shared machine
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import types
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
import torch.autograd.forward_ad as fwAD
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzdiff.api import environ_config
from fuzzdiff.checks import get_check
from fuzzdiff.checks.forward2 import NEEDS_GRAD, SMALL
from fuzzdiff.config import FuzzConfig
from fuzzdiff.fuzzing import example_structures, fuzz, settle_heap
from fuzzdiff.runner import case_strategy, run_check
from fuzzdiff.spec import parse_spec
from fuzzdiff.targets import UnknownTarget, get_target
from strategies.values import sampling_interval

# Preferred mix, in order; the first ``--ops`` that exist in the catalog and the
# bare loop can drive (all-tensor positional args, no strategy-valued kwargs) are used.
PREFERRED = (
    "exp",
    "log",
    "sqrt",
    "abs",
    "sin",
    "tanh",
    "sigmoid",
    "mul",
    "add",
    "matmul",
    "sum",
    "softmax",
    "cos",
    "atan",
)
EPS = 1e-6
F64 = torch.float64
SEED = 0
TARGET = 0.5  # the grad ratio's; the other checks' ratios are informational
# the backend of the compile check's bare loop, and the only one its fuzzdiff side draws
COMPILE_BACKEND = "aot_eager"
VMAP_BATCH = 3  # the vmap check draws batch sizes 1 to 5


# -- choosing the ops ------------------------------------------------------------------


def bare_supported(target) -> str | None:
    """None when the bare loop can run ``target`` exactly as the grad check does."""
    if target.kinds:
        return "has index/mask/no-grad arguments"
    if target.kwargs:
        return "has keyword arguments"
    if not target.functional:
        return "mutates its inputs"
    if getattr(target, "random", False):
        return "is random"
    if target.min_side > target.max_side:
        return "has no valid sizes"
    return None


def choose_ops(names, count: int):
    chosen, skipped = [], []
    for name in names:
        if len(chosen) == count:
            break
        try:
            target = get_target(name)
        except (UnknownTarget, ValueError):
            skipped.append((name, "not in the catalog"))
            continue
        why = bare_supported(target)
        if why:
            skipped.append((name, why))
            continue
        chosen.append(target)
    return chosen, skipped


# -- fuzzdiff side ----------------------------------------------------------------------


def hyp_settings(n: int) -> settings:
    return settings(
        max_examples=n,
        database=None,
        derandomize=True,
        deadline=None,
        print_blob=False,
        suppress_health_check=list(HealthCheck),
    )


def fuzz_config(check: str) -> FuzzConfig:
    """The settings under $FUZZDIFF_*, with the compile check's backends narrowed
    to the one its bare loop compiles with, for a like-for-like figure."""
    if check != "compile":
        return environ_config()
    return replace(environ_config(), compile_backends=(COMPILE_BACKEND,))


def fuzzdiff_op(
    check: str, target, n: int, kinds: Counter, max_side: int | None = None, config: FuzzConfig | None = None
) -> int:
    tally = fuzz(check, target, settings=hyp_settings(n), max_side=max_side, config=config)
    kinds.update(tally.counts)
    return tally.examples


# -- bare side -------------------------------------------------------------------------


class BareShapes:
    """Shapes for a spec drawn with torch.randint: shared names, fixed ints, ``#``, groups."""

    def __init__(self, target, max_variadic: int = 2, max_side: int | None = None):
        self.args = parse_spec(target.spec)
        self.lo, self.hi = target.min_side, target.max_side if max_side is None else max_side
        self.max_variadic = max_variadic

    def _side(self, g) -> int:
        return int(torch.randint(self.lo, self.hi + 1, (), generator=g))

    def draw(self, g) -> list[tuple[int, ...]]:
        sizes, groups, out = {}, {}, []
        for arg in self.args:
            shape: list[int] = []
            for d in arg.dims:
                if d.kind == "fixed":
                    shape.append(d.size)
                elif d.variadic:
                    key = d.name if d.kind == "name" else object()
                    if key not in groups:
                        k = int(torch.randint(0, self.max_variadic + 1, (), generator=g))
                        groups[key] = tuple(self._side(g) for _ in range(k))
                    grp = groups[key]
                    if d.broadcast:
                        grp = tuple(s if torch.rand((), generator=g) < 0.5 else 1 for s in grp)
                    shape.extend(grp)
                elif d.kind == "anon":
                    shape.append(self._side(g))
                else:
                    if d.name not in sizes:
                        sizes[d.name] = self._side(g)
                    s = sizes[d.name]
                    if d.broadcast and torch.rand((), generator=g) < 0.5:
                        s = 1
                    shape.append(s)
            out.append(tuple(shape))
        return out


def _floating(out):
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in outs if isinstance(o, torch.Tensor) and o.dtype.is_floating_point]


def _dot(a, b) -> float:
    """<a, b> on tensors already in float64, as fuzzdiff.directions.dot computes it."""
    return sum(float(torch.sum(x * y)) for x, y in zip(a, b) if x.numel())


def _absdot(a, b) -> float:
    """<|a|, |b|>, as fuzzdiff.directions.absdot computes it for reals."""
    return sum(float(torch.sum((x * y).abs())) for x, y in zip(a, b) if x.numel())


def _as(t, dtype):
    """``t`` in ``dtype``, without a call when it already is (as the check does)."""
    return t if t.dtype is dtype else t.to(dtype)


def _inputs(shapes, intervals, dtype, g) -> list[torch.Tensor]:
    """The drawn values, in float64 within each argument's interval and then
    in ``dtype``: what a case's storages hold."""
    return [
        _as(lo + (hi - lo) * torch.rand(shape, generator=g, dtype=F64), dtype)
        for shape, (lo, hi) in zip(shapes, intervals)
    ]


def _probes(ts, g) -> list[torch.Tensor]:
    """One probe per tensor, as fuzzdiff's (mean 0.25, deviation 1.5): one
    torch.normal call in float64, cast to the tensor's dtype where it differs."""
    return [_as(torch.normal(0.25, 1.5, t.shape, generator=g, dtype=F64), t.dtype) for t in ts]


def bare_grad(fn, shapes, intervals, dtype, g) -> float:
    """The grad check's torch calls for one example, on freshly drawn inputs:
    the same calls fuzzdiff.checks.grad makes on a contiguous, unaliased case,
    neither more nor fewer (one pass for <J^T v, u> and its scale, each probe
    one torch.normal call, a dtype conversion only where the dtype differs,
    perturbed points by one torch.add)."""
    xs = [x.requires_grad_(True) for x in _inputs(shapes, intervals, dtype, g)]
    # reverse: <J^T v, u>, with a random non-unit cotangent v and direction u
    outs = _floating(fn(*xs))
    vs = _probes(outs, g)
    pairs = [(o, v) for o, v in zip(outs, vs) if o.requires_grad]
    grads = torch.autograd.grad([o for o, _ in pairs], xs, [v for _, v in pairs], allow_unused=True)
    grads = [torch.zeros_like(x) if gr is None else gr for gr, x in zip(grads, xs)]
    us = _probes(xs, g)
    analytic = scale = 0.0
    for gr, u in zip(grads, us):
        if gr.numel():
            p = _as(gr, F64) * _as(u, F64)
            analytic += float(p.sum())
            scale += float(p.abs().sum())
    # finite differences in float64 at the same values
    x64 = [_as(x.detach(), F64) for x in xs]
    u64 = [_as(u, F64) for u in us]
    with torch.no_grad():
        outs64 = _floating(fn(*x64))

        def at(h):
            return _floating(fn(*[torch.add(x, u, alpha=h) for x, u in zip(x64, u64)]))

        d1 = [(p - m) / (2 * EPS) for p, m in zip(at(EPS), at(-EPS))]
        d2 = [(p - m) / (4 * EPS) for p, m in zip(at(2 * EPS), at(-2 * EPS))]
    v64 = [_as(v, F64) for v in vs]
    n1, n2 = _dot(v64, d1), _dot(v64, d2)
    noise = abs(n1 - n2) + 2.0**-52 / EPS * _absdot(v64, outs64)
    return analytic - n1 + 0.0 * (scale + noise)


# -- the second-order identities, as the checks compute them (torch calls only) --------


def _leaves(xs, cast=None, requires_grad: bool = True) -> list[torch.Tensor]:
    """Fresh leaves on the drawn values, as each Case.materialize of a check
    makes them: a detach, and a cast where the check casts."""
    out = [(x if cast is None else _as(x, cast)).detach() for x in xs]
    return [l.requires_grad_() for l in out] if requires_grad else out


def _wide(ts) -> list[torch.Tensor]:
    """Detached and in float64, as fuzzdiff.directions widens a dot's operands."""
    return [_as(t.detach() if t.requires_grad else t, F64) for t in ts]


def _dot_scale(a, b) -> tuple[float, float]:
    """``<a, b>`` and ``<|a|, |b|>`` as the second-order checks take them: two
    calls (fuzzdiff.directions.dot, then absdot), each widening its operands."""
    return _dot(_wide(a), _wide(b)), _absdot(_wide(a), _wide(b))


def _vjp(outs, leaves, cotangents, create_graph: bool = False) -> list[torch.Tensor]:
    """``J^T v`` as fuzzdiff.paths.reverse.vjp takes it: zeros for a leaf the outputs do not reach."""
    pairs = [(o, v) for o, v in zip(outs, cotangents) if o.requires_grad]
    if not pairs:
        return [torch.zeros_like(l) for l in leaves]
    grads = torch.autograd.grad(
        [o for o, _ in pairs], leaves, [v for _, v in pairs], allow_unused=True, create_graph=create_graph
    )
    return [torch.zeros_like(l) if gr is None else gr for gr, l in zip(grads, leaves)]


def _reverse_over_reverse(f, leaves, v, w, against) -> tuple[float, float]:
    """``<grad <J^T v, w>, against>`` by reverse mode twice, the cotangent
    requiring grad as the checks' does (gradgrad and forward2 alike)."""
    grads = _vjp(f(*leaves), leaves, [t.detach().requires_grad_() for t in v], create_graph=True)
    h = sum((gr * wi.to(gr.dtype)).sum() for gr, wi in zip(grads, w) if gr.requires_grad)
    if isinstance(h, torch.Tensor) and h.requires_grad:
        second = _vjp([h], leaves, [torch.ones_like(h)])
    else:
        second = [torch.zeros_like(l) for l in leaves]
    return _dot_scale(second, against)


def _forward_over_reverse(f, leaves, v, along, against) -> tuple[float, float]:
    """The tangent of ``J^T v`` along ``along`` (dual numbers through the
    backward), contracted with ``against`` (gradgrad and forward2 alike)."""
    with fwAD.dual_level():
        duals = [fwAD.make_dual(l, d) for l, d in zip(leaves, along)]
        grads = _vjp(f(*duals), duals, [t.detach().requires_grad_() for t in v], create_graph=True)
        tangents = []
        for gr in grads:
            t = fwAD.unpack_dual(gr).tangent
            tangents.append(torch.zeros_like(gr) if t is None else t.detach())
    return _dot_scale(tangents, against)


def _reverse_over_forward(f, leaves, u, u2, w) -> tuple[float, float]:
    """forward2's ``<grad <w, J u>, u'>``: reverse mode through forward mode's ``J u``."""
    with fwAD.dual_level():
        duals = [fwAD.make_dual(l, d) for l, d in zip(leaves, u)]
        tangents = []
        for o in f(*duals):
            t = fwAD.unpack_dual(o).tangent
            tangents.append(torch.zeros_like(o) if t is None else t)
    grads = _vjp(tangents, leaves, [wi.to(t.dtype) for wi, t in zip(w, tangents)])
    return _dot_scale(grads, u2)


def _forward_over_forward(f, leaves, u, u2, w) -> tuple[float, float]:
    """forward2's ``<w, d2f[u, u']>`` by torch.func.jvp along u' of torch.func.jvp along u."""
    inner = tuple(u)

    def tangents(*x):
        return torch.func.jvp(lambda *y: tuple(f(*y)), x, inner)[1]

    second = torch.func.jvp(tangents, tuple(l.detach() for l in leaves), tuple(u2))[1]
    return _dot_scale(w, second)


JACOBIANS = {
    "hessian": torch.func.hessian,
    "jacfwd(jacfwd)": lambda g, argnums: torch.func.jacfwd(torch.func.jacfwd(g, argnums), argnums),
    "jacrev(jacrev)": lambda g, argnums: torch.func.jacrev(torch.func.jacrev(g, argnums), argnums),
}


def _by_jacobians(how: str, f, leaves, u, u2, w) -> tuple[float, float]:
    """forward2's ``w u^T H u'`` from the full Hessian torch.func builds (``how``),
    for one output of one element: every block contracted in float64."""

    def scalar(*x):
        return f(*x)[0].reshape(())

    n = len(leaves)
    blocks = JACOBIANS[how](scalar, tuple(range(n)))(*[l.detach() for l in leaves])
    weight = w[0].reshape(()).to(F64)
    total = scale = 0.0
    for i in range(n):
        for j in range(n):
            a, b = u[i].to(F64), u2[j].to(F64)
            pair = a.reshape(a.shape + (1,) * b.dim()) * b
            block = blocks[i][j].detach().to(F64)
            total += float((block * pair).sum() * weight)
            scale += float((block.abs() * pair.abs()).sum() * weight.abs())
    return total, scale


# forward2's identities by name, each ``(f, leaves, u, u', w) -> (value, scale)``
FORWARD2: dict[str, Callable[..., tuple[float, float]]] = {
    "forward-over-forward": _forward_over_forward,
    "reverse-over-forward": _reverse_over_forward,
    "forward-over-reverse": lambda f, x, u, u2, w: _forward_over_reverse(f, x, w, u2, u),
    "reverse-over-reverse": lambda f, x, u, u2, w: _reverse_over_reverse(f, x, w, u, u2),
    **{how: lambda f, x, u, u2, w, how=how: _by_jacobians(how, f, x, u, u2, w) for how in JACOBIANS},
}


# gradgrad's identities, each ``(f, leaves, v, u, w) -> (value, scale)``: the
# derivative of ``<J^T v, w>`` along u by reverse, then by forward mode
GRADGRAD: tuple[Callable[..., tuple[float, float]], ...] = (
    lambda f, x, v, u, w: _reverse_over_reverse(f, x, v, w, u),
    _forward_over_reverse,
)


def _forward2_paths(small: bool) -> list[str]:
    """The identities forward2 judges, in its order (stage by stage, all of
    them when they pass); the Hessians only for ``small`` cases."""
    first, last = (("hessian", "jacrev(jacrev)"), ("jacfwd(jacfwd)",)) if small else ((), ())
    return [
        "forward-over-reverse",
        "reverse-over-reverse",
        *first,
        "reverse-over-forward",
        "forward-over-forward",
        *last,
    ]


def _first_derivative_difference(f, x64, v64, u, w) -> tuple[float, float]:
    """gradgrad's reference: central differences along u of ``<J^T v, w>``,
    ``J^T v`` by reverse mode in float64 at ``x +- eps u`` and ``x +- 2 eps u``."""

    def h(step: float) -> tuple[float, float]:
        moved = [(l.detach() + step * ui.to(l.dtype)).requires_grad_() for l, ui in zip(x64, u)]
        return _dot_scale(_vjp(f(*moved), moved, v64), w)

    (p1, s), (m1, _) = h(EPS), h(-EPS)
    (p2, _), (m2, _) = h(2 * EPS), h(-2 * EPS)
    n1, n2 = (p1 - m1) / (2 * EPS), (p2 - m2) / (4 * EPS)
    return n1, abs(n1 - n2) + 2.0**-52 / EPS * s


def _second_difference(f, x64, u, u2, w) -> tuple[float, float]:
    """forward2's reference: central differences along u' of ``<J^T w, u>``,
    ``J^T w`` by reverse mode in float64 at ``x``, ``x +- eps u'`` and
    ``x +- 2 eps u'`` (points by one torch.add each, as paths.numerical builds them)."""

    def first(*x):
        with torch.enable_grad():
            moved = [t.detach().requires_grad_() for t in x]
            outs = f(*moved)
            return _vjp(outs, moved, [wi.to(o.dtype) for wi, o in zip(w, outs)])

    d = [_as(t, F64) for t in u2]
    points = [[torch.add(l, di, alpha=h) for l, di in zip(x64, d)] for h in (EPS, -EPS, 2 * EPS, -2 * EPS)]
    with torch.no_grad():
        at = first(*x64)
        plus, minus, plus2, minus2 = [first(*p) for p in points]
        d1 = [(p - m) / (2 * EPS) for p, m in zip(plus, minus)]
        d2 = [(p - m) / (4 * EPS) for p, m in zip(plus2, minus2)]
    v = _wide(u)
    n1, n2 = _dot(v, d1), _dot(v, d2)
    return n1, abs(n1 - n2) + 2.0**-52 / EPS * _absdot(v, at)


def bare_gradgrad(fn, shapes, intervals, dtype, g) -> float:
    """The gradgrad check's torch calls for one example: per identity
    (reverse over reverse, then forward over reverse: the check measures
    each on its own), fresh leaves on the drawn values and their forward
    under no_grad (the check's, for the cotangent's shape), the second
    derivative of ``<J^T v, w>`` along u with its dot and absdot; then leaves
    cast to float64, their forward under no_grad (again for the cotangent's
    shape), and the first derivative by reverse mode at ``x +- eps u`` and
    ``x +- 2 eps u``, each point with its dot and absdot. The probes v, u, w
    drawn once per example (each one torch.normal call, cast where the dtype
    differs; v once more to float64 for the reference), which the check makes
    again from their seeds per measurement. Neither more nor fewer, as in
    bare_grad; none of the check's graph walks (its once_differentiable
    test), no confirmation logic."""

    def f(*a):
        return _floating(fn(*a))

    xs = _inputs(shapes, intervals, dtype, g)
    total, probes = 0.0, None
    for second in GRADGRAD:
        leaves = _leaves(xs)
        with torch.no_grad():
            outs = f(*leaves)
        u, w, v = probes = probes or (_probes(leaves, g), _probes(leaves, g), _probes(outs, g))
        value, scale = second(f, leaves, v, u, w)
        x64 = _leaves(xs, F64)
        with torch.no_grad():
            f(*x64)
        numeric, noise = _first_derivative_difference(f, x64, _wide(v), u, w)
        total += value - numeric + 0.0 * (scale + noise)
    return total


def bare_forward2(fn, shapes, intervals, dtype, g) -> float:
    """The forward2 check's torch calls for one example: first what it runs
    to decide which identities apply (fresh leaves, a forward under no_grad,
    the forward and a vjp with its graph kept, for a cotangent of its own);
    then per identity, all of them as on a case where each passes (forward
    over reverse, reverse over reverse, reverse over forward, forward over
    forward, and for one output of one element and at most SMALL leaf
    elements hessian, jacrev(jacrev) and jacfwd(jacfwd)), fresh leaves, their
    forward under no_grad (the check's, for the probes' shapes) and the
    identity with its dot and absdot; the reference once, shared by the
    identities as in the check: float64 leaves and ``J^T w`` by reverse mode
    at ``x``, ``x +- eps u'`` and ``x +- 2 eps u'``. The probes u, u', w
    drawn once per example (each one torch.normal call, cast where the dtype
    differs), which the check makes again from their seeds per identity.
    Neither more nor fewer; none of the check's introspection (its
    torch.library op spy, its graph walks), no confirmation logic."""

    def f(*a):
        return _floating(fn(*a))

    xs = _inputs(shapes, intervals, dtype, g)
    leaves = _leaves(xs)
    with torch.no_grad():
        f(*[l.detach() for l in leaves])
    outs = f(*leaves)
    _vjp(outs, leaves, [v.requires_grad_() for v in _probes(outs, g)], create_graph=True)
    small = len(outs) == 1 and outs[0].numel() == 1 and 0 < sum(l.numel() for l in leaves) <= SMALL
    total, probes, reference = 0.0, None, None
    for name in _forward2_paths(small):
        leaves = _leaves(xs, requires_grad=name in NEEDS_GRAD)
        with torch.no_grad():
            outs = f(*[l.detach() for l in leaves])
        u, u2, w = probes = probes or (_probes(leaves, g), _probes(leaves, g), _probes(outs, g))
        value, scale = FORWARD2[name](f, leaves, u, u2, w)
        if reference is None:
            reference = _second_difference(f, _leaves(xs, F64, requires_grad=False), u, u2, w)
        total += value - reference[0] + 0.0 * (scale + reference[1])
    return total


def bare_vmap(fn, shapes, intervals, dtype, g) -> bool:
    """The vmap check's torch calls for one example of its plain composition,
    at a batch of VMAP_BATCH with in_dims and out_dims 0: each example's
    inputs drawn, the function looped over them and its outputs stacked, the
    inputs stacked along dim 0 and the function vmapped over them, and each
    vmapped output compared with its stacked loop by one torch.allclose. The
    check also draws batch sizes 1 to 5, other in_dims and out_dims, layouts,
    vmap of vmap and compositions with vjp, jvp and grad (plain vmap is one of
    seven), and its comparison also finds the worst element, for its report."""

    def f(*a):
        return tuple(_floating(fn(*a)))

    examples = [_inputs(shapes, intervals, dtype, g) for _ in range(VMAP_BATCH)]
    looped = [torch.stack(outs) for outs in zip(*[f(*args) for args in examples])]
    got = torch.func.vmap(f, in_dims=0)(*[torch.stack(args) for args in zip(*examples)])
    return all(torch.allclose(a, b, equal_nan=True) for a, b in zip(got, looped))


_COMPILED: dict[Callable, Callable] = {}


def _own_code(fn: Callable, n: int) -> Callable:
    """``fn`` behind a function with a code object of its own: dynamo keeps one
    cache per code object, and every op's wrapper would share one (as every
    builtin's shares torch's), so that all the ops' graphs together would hit
    its recompile limit (fuzzdiff.paths.compiled does the same)."""

    def call(*args):
        return fn(*args)

    code = call.__code__.replace(co_name=f"bare_{n}")
    return types.FunctionType(code, call.__globals__, code.co_name, None, call.__closure__)


def _compiled(fn: Callable) -> Callable:
    """``fn`` under torch.compile(backend=COMPILE_BACKEND, dynamic=True), built
    once per op. Recompile limits as fuzzdiff's side sets them: an op meets
    many guard sets (dtypes, ranks, sizes 0 and 1), and a fallback to eager at
    dynamo's default limit would time eager code as compiled."""
    compiled = _COMPILED.get(fn)
    if compiled is None:
        from torch._dynamo import config  # startup time: seconds to import, and only this loop needs it

        config.recompile_limit = 256
        config.accumulated_recompile_limit = 1 << 20
        config.fail_on_recompile_limit_hit = True
        compiled = _COMPILED[fn] = torch.compile(_own_code(fn, len(_COMPILED)), backend=COMPILE_BACKEND, dynamic=True)
    return compiled


def _compared(outs, leaves, v) -> list[torch.Tensor]:
    """What the compile check compares of one side: the outputs, the inputs
    after the call and a copy of each one's storage, and the gradients of
    ``<v, outputs>``."""
    storages = [l.detach().clone() for l in leaves]
    return [*outs, *leaves, *storages, *_vjp(outs, leaves, v)]


def bare_compile(fn, shapes, intervals, dtype, g) -> bool:
    """The compile check's torch calls for one example with backend aot_eager
    and no transform: eager forward and backward on fresh leaves, with a
    cotangent drawn for the outputs (one torch.normal call each, cast where
    the dtype differs), a copy of each input's storage; the same through the
    op's compiled callable (built once per op: _compiled); and every output,
    input, storage copy and gradient compared by one torch.allclose. The
    check also draws a torch.func transform of f in five examples of eight
    (grad, vjp, jvp, vmap, dual inputs), compiled whole; it compares output
    metadata too, and its comparison finds the worst element, for its report."""
    xs = _inputs(shapes, intervals, dtype, g)
    leaves = _leaves(xs)
    outs = _floating(fn(*leaves))
    v = _probes(outs, g)
    eager = _compared(outs, leaves, v)
    leaves = _leaves(xs)
    got = _compared(_floating(_compiled(fn)(*leaves)), leaves, v)
    return all(torch.allclose(a, b, equal_nan=True) for a, b in zip(got, eager))


# The bare loop of each check: one example per call, ``(fn, shapes, intervals, dtype, g)``.
BARE: dict[str, Callable[..., object]] = {
    "grad": bare_grad,
    "forward2": bare_forward2,
    "gradgrad": bare_gradgrad,
    "vmap": bare_vmap,
    "compile": bare_compile,
}


class BareOp:
    """One op's bare loop for one check: shapes, value intervals and dtypes resolved once."""

    def __init__(self, target, example: Callable[..., object], max_side: int | None = None):
        self.target, self.example = target, example
        self.shaper = BareShapes(target, max_side=max_side)
        self.intervals = [
            target.sample.get(a.name) or sampling_interval(target.domain.get(a.name, (None, None)))
            for a in self.shaper.args
        ]

    def run(self, n: int, g) -> int:
        dtypes, fn = self.target.dtypes, self.target.fn
        for _ in range(n):
            dtype = dtypes[int(torch.randint(0, len(dtypes), (), generator=g))]
            self.example(fn, self.shaper.draw(g), self.intervals, dtype, g)
        return n


# -- diagnostics: where the fuzzdiff side's time goes -------------------------------


def diagnostics(targets, n: int, max_side: int | None, clock=time.perf_counter) -> dict[str, float]:
    """Rates (per second) of: drawing cases only, as fuzz() draws them
    (fuzzing.example_structures; per structure); run_check only, on
    every value variant of those pre-drawn cases (per run); and Hypothesis
    itself with one integer per example and an empty test (its floor, per
    example), with the structures per example drawn on average."""
    check = get_check("grad")
    variants = environ_config().variants
    drawn: list = []
    t0 = clock()
    examples = [0]

    def collect(target):
        @hyp_settings(n)
        @given(example_structures(case_strategy(check, target, max_side=max_side), environ_config().structures))
        def test(cases):
            examples[0] += 1
            drawn.extend((target, case) for case in cases)

        test()

    for target in targets:
        collect(target)
    t1 = clock()
    for target, case in drawn:
        for k in range(variants):
            run_check(check, target, case.reseeded(k))
    t2 = clock()
    count = [0]

    @hyp_settings(n * len(targets))
    @given(st.integers(0, 2**32 - 1))
    def floor(x):
        count[0] += 1

    floor()
    t3 = clock()
    return {
        "draw": len(drawn) / (t1 - t0),
        "run_check": len(drawn) * variants / (t2 - t1),
        "floor": count[0] / (t3 - t2),
        "variants": variants,
        "structures": len(drawn) / max(examples[0], 1),
    }


# -- driver ----------------------------------------------------------------------------

CLOCKS = {"wall": time.perf_counter, "process": time.process_time}


def measure(
    check: str, targets, n: int, seconds: float, g, kinds: Counter, max_side: int | None = None, clock=time.perf_counter
):
    """Alternate the two sides op by op, so that a change in machine load
    between the two measurements does not bias the ratio; repeat whole rounds
    until both sides together have run ``seconds`` (one round at minimum).
    Per op the bare side runs as many examples as the fuzzdiff side did
    (``n`` drawn structures times the value variants), so both sides of a
    pair take about as long and see the same load."""
    bare = [BareOp(t, BARE[check], max_side) for t in targets]
    config = fuzz_config(check)
    f_done = b_done = rounds = 0
    f_time = b_time = 0.0
    while True:
        for target, b in zip(targets, bare):
            t0 = clock()
            done = fuzzdiff_op(check, target, n, kinds, max_side, config)
            t1 = clock()
            b_done += b.run(max(done, 1), g)
            t2 = clock()
            f_done += done
            f_time, b_time = f_time + (t1 - t0), b_time + (t2 - t1)
        rounds += 1
        if f_time + b_time >= seconds:
            return (f_done, f_time), (b_done, b_time), rounds


@dataclass
class Measured:
    """One check's figures: the ops it ran on (and those it skipped, with
    why), examples and seconds on each side, whole rounds, and the fuzzdiff
    side's verdicts."""

    check: str
    targets: list
    skipped: list[tuple[str, str]]
    f_done: int = 0
    f_time: float = 0.0
    b_done: int = 0
    b_time: float = 0.0
    rounds: int = 0
    kinds: Counter = field(default_factory=Counter)

    @property
    def f_rate(self) -> float:
        return self.f_done / self.f_time if self.f_time else math.nan

    @property
    def b_rate(self) -> float:
        return self.b_done / self.b_time if self.b_time else math.nan

    @property
    def ratio(self) -> float:
        return self.f_rate / self.b_rate


def bench_check(check: str, targets, args, g, clock) -> Measured:
    """Warm up (imports, torch kernels, Hypothesis strategy caches, compiled
    graphs), then measure ``check`` on the ops it applies to (Check.why_not)."""
    m = Measured(check, [], [])
    for t in targets:
        why = get_check(check).why_not(t)
        if why:
            m.skipped.append((t.name, why))
        else:
            m.targets.append(t)
    if not m.targets:
        return m
    n, warmup = examples_for(check, args)
    if warmup:
        measure(check, m.targets, warmup, 0.0, g, Counter(), args.max_side, clock)
    (m.f_done, m.f_time), (m.b_done, m.b_time), m.rounds = measure(
        check, m.targets, n, args.seconds, g, m.kinds, args.max_side, clock
    )
    return m


def print_headline(m: Measured) -> None:
    """grad's figures, the headline: both sides in full, and the ratio against its target."""
    print(f"fuzzdiff verdicts: {dict(sorted(m.kinds.items()))}")
    print()
    w = 28
    print(f"{'side':<{w}} {'examples':>9} {'rounds':>7} {'seconds':>9} {'examples/s':>11}")
    print("-" * (w + 40))
    print(f"{'fuzzdiff (grad check)':<{w}} {m.f_done:>9} {m.rounds:>7} {m.f_time:>9.2f} {m.f_rate:>11.1f}")
    print(f"{'bare torch loop':<{w}} {m.b_done:>9} {m.rounds:>7} {m.b_time:>9.2f} {m.b_rate:>11.1f}")
    print("-" * (w + 40))
    verdict = "meets" if m.ratio >= TARGET else "BELOW"
    print(f"{'ratio fuzzdiff/bare':<{w}} {m.ratio:>39.3f}   ({verdict} the {TARGET} target)")


def print_diagnostics(d: dict[str, float], f_rate: float, b_rate: float) -> None:
    """Where grad's fuzzdiff side spends its time, per example (diagnostics())."""
    k, m = d["variants"], d["structures"]
    us = lambda rate: 1e6 / rate  # noqa: E731
    print()
    print(
        f"where the fuzzdiff side's time goes (microseconds per example; {k} value "
        f"variants share one drawn case, {m:.2f} drawn cases share one Hypothesis example):"
    )
    print(f"  {'bare torch loop':<58} {us(b_rate):>9.1f}")
    print(f"  {'fuzzdiff, all of it (as measured above)':<58} {us(f_rate):>9.1f}")
    print(f"  {'  run_check on pre-drawn variants':<58} {us(d['run_check']):>9.1f}")
    print(f"  {'  drawing a case (case_strategy), / variants':<58} {us(d['draw']) / k:>9.1f}")
    print(f"  {'    of which the Hypothesis floor (one integer), / runs':<58} {us(d['floor']) / (k * m):>9.1f}")
    rest = us(f_rate) - us(d["run_check"]) - us(d["draw"]) / k
    print(f"  {'  the rest (variant loop, garbage collection, noise)':<58} {rest:>9.1f}")
    print(f"  {'best ratio if drawing were free (run_check/bare)':<58} {d['run_check'] / b_rate:>9.3f}")


def print_checks(results: list[Measured]) -> None:
    """One line per check, both sides' rates and their ratio; only grad's has a
    target, the others are informational. Then each check's verdicts and skips."""
    w = 20
    print(f"{'check':<{w}} {'examples':>9} {'fuzzdiff examples/s':>20} {'bare examples/s':>16} {'ratio':>7}")
    print("-" * (w + 56))
    for m in results:
        name = f"compile ({COMPILE_BACKEND})" if m.check == "compile" else m.check
        if not m.targets:
            print(f"{name:<{w}}   (applies to none of the ops)")
            continue
        note = f"   ({'meets' if m.ratio >= TARGET else 'BELOW'} the {TARGET} target)" if m.check == "grad" else ""
        print(f"{name:<{w}} {m.f_done:>9} {m.f_rate:>20.1f} {m.b_rate:>16.1f} {m.ratio:>7.3f}{note}")
    print("-" * (w + 56))
    for m in results:
        if m.targets:
            print(f"{m.check} verdicts: {dict(sorted(m.kinds.items()))}")
        for name, why in m.skipped:
            print(f"  ({m.check} skips {name}: {why})")


def parse_args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument(
        "--checks",
        nargs="+",
        choices=tuple(BARE),
        default=list(BARE),
        metavar="CHECK",
        help=f"the checks to measure, in this order (default: {' '.join(BARE)}); "
        "grad's is the headline figure, with a target",
    )
    p.add_argument(
        "--examples",
        type=int,
        default=200,
        metavar="N",
        help="grad examples per op per round, on each side (default: 200)",
    )
    p.add_argument(
        "--examples-costly",
        type=int,
        default=10,
        metavar="N",
        help="examples per op per round, on each side, of the other checks (default: 10)",
    )
    p.add_argument(
        "--seconds",
        type=float,
        default=0.0,
        metavar="S",
        help="repeat whole rounds (both sides, op by op, interleaved) until each check's "
        "measurement has taken S seconds in all (default: 0, a single round)",
    )
    p.add_argument("--ops", type=int, default=6, metavar="K", help="number of catalog ops in the mix (default: 6)")
    p.add_argument(
        "--targets",
        nargs="+",
        default=None,
        metavar="NAME",
        help=f"explicit op names instead of the preferred list {PREFERRED}",
    )
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads for both sides (default: 1)")
    p.add_argument(
        "--warmup",
        type=int,
        default=10,
        metavar="N",
        help="untimed examples per op before measuring grad, and compile, whose warm-up compiles its graphs "
        "(default: 10)",
    )
    p.add_argument(
        "--warmup-costly",
        type=int,
        default=2,
        metavar="N",
        help="untimed examples per op before measuring forward2, gradgrad and vmap (default: 2)",
    )
    p.add_argument(
        "--max-side",
        type=int,
        default=None,
        metavar="K",
        help="largest dim size on both sides (default: each target's own max_side); "
        "larger tensors make torch's share of the work grow",
    )
    p.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="wall: elapsed time (default); process: this process's CPU time, steadier when other jobs share the cores",
    )
    p.add_argument(
        "--no-diagnostics",
        action="store_true",
        help="skip grad's breakdown (draw only, run_check only, Hypothesis floor)",
    )
    p.add_argument(
        "--profile",
        metavar="FILE",
        default=None,
        help="also cProfile one fuzzdiff round of the first of --checks and write the stats to FILE",
    )
    args = p.parse_args(argv)
    if args.examples < 1 or args.examples_costly < 1 or args.ops < 1 or args.seconds < 0:
        p.error("--examples, --examples-costly and --ops must be positive, --seconds non-negative")
    if args.warmup < 0 or args.warmup_costly < 0:
        p.error("--warmup and --warmup-costly must be non-negative")
    args.checks = list(dict.fromkeys(args.checks))
    return args


def examples_for(check: str, args) -> tuple[int, int]:
    """Examples per op: measured per round, and untimed before. grad's own
    counts; fewer for the costlier checks, and a short warm-up for those
    that compile nothing (one that compiles warms up in full: its warm-up
    compiles the graphs that its measurement would otherwise time)."""
    if check == "grad":
        return args.examples, args.warmup
    return args.examples_costly, args.warmup if get_check(check).compiles else args.warmup_costly


def describe_checks(args) -> str:
    """The header's second line: each check's examples per op, and compile's backend."""
    described = []
    for check in args.checks:
        backend = f", backend {COMPILE_BACKEND}" if check == "compile" else ""
        n, warmup = examples_for(check, args)
        described.append(f"{check} ({n} examples per op after {warmup} untimed{backend})")
    return "checks: " + ", ".join(described)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    settle_heap()  # as fuzzdiff's own processes do (the command line, campaign workers)
    names = args.targets or PREFERRED
    targets, skipped = choose_ops(names, len(names) if args.targets else args.ops)
    for name, why in skipped:
        print(f"  (skipping {name}: {why})", file=sys.stderr)
    if not targets:
        print("no usable ops in the catalog", file=sys.stderr)
        return 2

    g = torch.Generator().manual_seed(SEED)
    clock = CLOCKS[args.clock]
    print(
        f"ops: {', '.join(t.name for t in targets)}   torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s), value variants {environ_config().variants}, "
        f"{args.clock} clock"
    )
    print(describe_checks(args), flush=True)
    results = []
    for check in args.checks:
        m = bench_check(check, targets, args, g, clock)
        results.append(m)
        if check == "grad" and m.targets:
            print_headline(m)
            if not args.no_diagnostics:
                print_diagnostics(diagnostics(m.targets, args.examples, args.max_side, clock), m.f_rate, m.b_rate)
            print(flush=True)
    print_checks(results)

    if args.profile:
        import cProfile
        import pstats

        first = results[0]
        n, config = examples_for(first.check, args)[0], fuzz_config(first.check)
        prof = cProfile.Profile()
        prof.runcall(lambda: [fuzzdiff_op(first.check, t, n, Counter(), args.max_side, config) for t in first.targets])
        prof.dump_stats(args.profile)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    return 0 if all(math.isfinite(m.ratio) for m in results if m.targets) else 1


if __name__ == "__main__":
    sys.exit(main())
