"""The bare side of bench/throughput.py: per check, a loop of plain torch calls
doing the work one example of that check does on a contiguous, unaliased case,
neither more nor fewer (each ``bare_<check>`` says which), with shapes drawn by
``torch.randint`` and values by ``torch.rand``. No Hypothesis, no Case, no
layouts, no confirmation: the floor fuzzdiff's side is measured against.
"""

from __future__ import annotations

import types
from collections.abc import Callable

import torch
import torch.autograd.forward_ad as fwAD

from fuzzdiff.checks.forward2 import NEEDS_GRAD, SMALL
from fuzzdiff.case.spec import parse_spec
from strategies.values import sampling_interval

EPS = 1e-6
F64 = torch.float64
# the backend of the compile check's bare loop, and the only one its fuzzdiff side draws
COMPILE_BACKEND = "aot_eager"
VMAP_BATCH = 3  # the vmap check draws batch sizes 1 to 5


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
    """<a, b> on tensors already in float64, as fuzzdiff.case.directions.dot computes it."""
    return sum(float(torch.sum(x * y)) for x, y in zip(a, b) if x.numel())


def _absdot(a, b) -> float:
    """<|a|, |b|>, as fuzzdiff.case.directions.absdot computes it for reals."""
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
    """Detached and in float64, as fuzzdiff.case.directions widens a dot's operands."""
    return [_as(t.detach() if t.requires_grad else t, F64) for t in ts]


def _dot_scale(a, b) -> tuple[float, float]:
    """``<a, b>`` and ``<|a|, |b|>`` as the second-order checks take them: two
    calls (fuzzdiff.case.directions.dot, then absdot), each widening its operands."""
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
