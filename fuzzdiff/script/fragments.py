"""What each check contributes to a script: the two computations it compares.

A fragment is a function ``fragment(ctx) -> Fragment`` registered under the
check's name; a new check adds one function and one ``register`` line (here
or in its own module). Each body restates the check's first measurement in
plain torch, so the script prints the numbers fuzzdiff judged; the
confirmation steps (replay, other eps, neighbouring points) are not repeated.
"""

from __future__ import annotations

from collections.abc import Callable

from fuzzdiff.fragment import Fragment, lines

__all__ = ["Fragment", "FRAGMENTS", "register"]


FRAGMENTS: dict[str, Callable] = {}


def register(name: str) -> Callable:
    def deco(fn: Callable) -> Callable:
        FRAGMENTS[name] = fn
        return fn

    return deco


_lines = lines


@register("grad")
def grad(ctx) -> Fragment:
    return Fragment(
        "reverse mode <J^T v, u> vs finite differences <v, J u> in float64",
        _lines(
            f"# Reverse mode in {ctx.dtype}: <J^T v, u>.",
            "leaves = make_leaves()",
            "grads = vjp(f(*leaves), leaves, V)",
            "analytic, scale = dot(grads, U), absdot(grads, U)",
            "# Central finite differences in float64 at the same values: <v, J u>.",
            "numeric, noise = finite_difference(V, U)",
            'return finish([judge("<J^T v, u> (reverse mode) vs finite differences",',
            "                     analytic, numeric, scale + abs(numeric), noise)])",
        ),
        ("f", "vjp", "dot", "absdot", "finite_difference", "judge", "finish"),
        ("V", "U"),
    )


@register("forward")
def forward(ctx) -> Fragment:
    return Fragment(
        "forward-mode <v, J u> vs reverse-mode <J^T v, u> and vs finite differences",
        _lines(
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
        ("f", "jvp", "vjp", "dot", "absdot", "finite_difference", "judge", "finish"),
        ("V", "U"),
        forward_ad=True,
    )


@register("gradgrad")
def gradgrad(ctx) -> Fragment:
    return Fragment(
        "second derivatives (reverse over reverse, forward over reverse) vs finite differences of the first",
        _lines(
            "# h(x) = <J(x)^T v, w>: the first derivative contracted with a second probe w.",
            "# Central differences of h in float64, h by first-order reverse mode.",
            "x64 = make_leaves(torch.float64)",
            "",
            "def h_at(step):",
            "    moved = [(l.detach() + step * u.to(l.dtype)).requires_grad_() for l, u in zip(x64, U)]",
            "    g = vjp(f(*moved), moved, V64)",
            "    return dot(g, W), absdot(g, W)",
            "",
            "(p1, s), (m1, _) = h_at(EPS), h_at(-EPS)",
            "(p2, _), (m2, _) = h_at(2 * EPS), h_at(-2 * EPS)",
            "numeric = (p1 - m1) / (2 * EPS)",
            "noise = abs(numeric - (p2 - m2) / (4 * EPS)) + 2.0**-52 / EPS * s",
            "results = []",
            "try:",
            f"    # Reverse over reverse in {ctx.dtype}: <grad h, u>.",
            "    leaves = make_leaves()",
            "    g = vjp(f(*leaves), leaves, [v.detach().requires_grad_() for v in V], create_graph=True)",
            "    h = sum((gi * wi.to(gi.dtype)).sum() for gi, wi in zip(g, W) if gi.requires_grad)",
            "    if isinstance(h, torch.Tensor) and h.requires_grad:",
            "        grad_h = vjp([h], leaves, [torch.ones_like(h)])",
            "    else:",
            "        grad_h = [torch.zeros_like(l) for l in leaves]",
            '    results.append(judge("reverse over reverse vs finite differences of J^T v",',
            "                         dot(grad_h, U), numeric, absdot(grad_h, U) + abs(numeric), noise))",
            "except (NotImplementedError, RuntimeError) as e:",
            '    skip_missing_formula("reverse over reverse", e)',
            "try:",
            "    # Forward over reverse: the tangent of J^T v along u, contracted with w.",
            "    leaves = make_leaves()",
            "    with fwAD.dual_level():",
            "        duals = [fwAD.make_dual(l, same_layout(l, u)) for l, u in zip(leaves, U)]",
            "        g = vjp(f(*duals), duals, [v.detach().requires_grad_() for v in V], create_graph=True)",
            "        tangents = [fwAD.unpack_dual(gi).tangent for gi in g]",
            "        tangents = [torch.zeros_like(gi) if t is None else t.detach()",
            "                    for gi, t in zip(g, tangents)]",
            '    results.append(judge("forward over reverse vs finite differences of J^T v",',
            "                         dot(tangents, W), numeric, absdot(tangents, W) + abs(numeric), noise))",
            "except (NotImplementedError, RuntimeError) as e:",
            '    skip_missing_formula("forward over reverse", e)',
            "return finish(results)",
        ),
        ("f", "vjp", "same_layout", "dot", "absdot", "judge", "skip_missing_formula", "finish"),
        ("V", "V64", "U", "W"),
        forward_ad=True,
    )


EVALUATE_ARGS = '''
def evaluate(make_leaves, make_args):
    """Outputs, and gradients with respect to each differentiable argument as passed."""
    args = make_args(make_leaves())
    outs = outputs(call(*args))
    grads = vjp(outs, [args[i] for i in WRT], V) if WRT else []
    names = [f"output {k}" for k in range(len(outs))] + [f"grad of {ARG_NAMES[i]}" for i in WRT]
    return names, [t.detach() for t in (*outs, *grads)]
'''.strip("\n")


@register("layout")
def layout(ctx) -> Fragment:
    return Fragment(
        "the same values in two memory layouts give the same outputs and gradients",
        _lines(
            "# 1. The arguments in the fuzzed layout.",
            "names, got = evaluate(make_leaves, make_args)",
            "# 2. The very same values in another layout.",
            "_, expected = evaluate(make_leaves_other, make_args_other)",
            "return finish([compare(names, got, expected)])",
        ),
        ("outputs", "vjp", "compare", "finish"),
        ("V",),
        other_layout=True,
        extra=f"{ctx.wrt_constants()}\n\n\n{EVALUATE_ARGS}",
    )


@register("alias")
def alias(ctx) -> Fragment:
    accumulate = []
    for j, i in enumerate(ctx.wrt):
        k, lay = ctx.inputs.sources[i]
        leaf = ctx.inputs.leaf_names[k]
        if lay is None:
            accumulate.append(f"expected[{k}] = expected[{k}] + clone_grads[{j}]  # {ctx.names[i]} is {leaf}")
        else:
            accumulate.append(
                f"scatter_to_storage(expected[{k}], clone_grads[{j}], "
                f"{tuple(ctx.case.args[i].shape)!r}, {tuple(lay.strides)!r}, "
                f"{lay.offset})  # {ctx.names[i]} views {leaf}"
            )
    return Fragment(
        "aliased arguments vs independent clones: the same outputs, and each shared "
        "leaf's gradient is the sum of the clones' gradients",
        _lines(
            "# 1. As fuzzed: arguments share memory; gradients with respect to the leaves.",
            "leaves = make_leaves()",
            "outs = f(*leaves)",
            "got = [t.detach() for t in (*outs, *vjp(outs, leaves, V))]",
            'names = [f"output {k}" for k in range(len(outs))] + [f"grad of {n}" for n in LEAF_NAMES]',
            "# 2. Independent clones of the arguments; each clone's gradient is added to",
            "#    its leaf's gradient at the storage positions that argument reads.",
            "leaves = make_leaves()",
            "args = make_args(leaves)",
            "clones = [a.detach().clone().requires_grad_() if i in WRT else a for i, a in enumerate(args)]",
            "clone_outs = outputs(call(*clones))",
            "clone_grads = vjp(clone_outs, [clones[i] for i in WRT], V) if WRT else []",
            "clone_outs = [t.detach() for t in clone_outs]",
            "expected = [torch.zeros_like(l.detach()).contiguous() for l in leaves]",
            *accumulate,
            "return finish([compare(names, got, [*clone_outs, *expected])])",
        ),
        ("f", "vjp", "compare", "scatter_to_storage", "finish"),
        ("V",),
        extra=ctx.wrt_constants(),
    )


@register("mutation")
def mutation(ctx) -> Fragment:
    return Fragment(
        "a functional op leaves every input's storage bytes and metadata unchanged, through forward and backward",
        _lines(
            "leaves = make_leaves()",
            "args = make_args(leaves)",
            "watched = {**dict(zip(ARG_NAMES, args)),",
            '           **{f"leaf {n}": l for n, l in zip(LEAF_NAMES, leaves)}}',
            "before = {name: snapshot(t) for name, t in watched.items()}",
            "outs = outputs(call(*args))",
            'stage, what = "forward", changed(watched, before)',
            "if what is None and any(o.requires_grad for o in outs):",
            "    vjp(outs, leaves, V)",
            '    stage, what = "backward", changed(watched, before)',
            'return finish([(what is None, f"{stage} changed {what}" if what else',
            '                "forward and backward leave every input unchanged")])',
        ),
        ("outputs", "vjp", "snapshot", "finish"),
        ("V",),
        extra=ctx.wrt_constants(),
    )


@register("dtype")
def dtype(ctx) -> Fragment:
    return Fragment(
        f"{ctx.dtype} outputs and gradients vs float64 on the very same values",
        _lines(
            f"# 1. In {ctx.dtype}.",
            "leaves = make_leaves()",
            "outs = f(*leaves)",
            "low = [t.detach() for t in (*outs, *vjp(outs, leaves, V))]",
            'names = [f"output {k}" for k in range(len(outs))] + [f"grad of {n}" for n in LEAF_NAMES]',
            f"# 2. In float64, on the {ctx.dtype} values widened exactly.",
            "leaves = make_leaves(torch.float64)",
            "outs = f(*leaves)",
            "ref = [t.detach() for t in (*outs, *vjp(outs, leaves, V64))]",
            "# Each result on its own scale (the check also allows what conditioning explains).",
            "return finish([compare(names, low, ref)])",
        ),
        ("f", "vjp", "compare", "finish"),
        ("V", "V64"),
        extra=ctx.wrt_constants(),
    )
