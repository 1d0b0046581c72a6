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
