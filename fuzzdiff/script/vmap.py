"""The vmap check's script fragment: torch.func.vmap (and its compositions) vs a loop.

The script embeds every example's arguments as the loop passes them, the
batched arguments exactly as vmap got them (stacked at in_dims, in the drawn
memory layout), and the per-example cotangents and tangents; it then runs the
plan's composition both ways, as ``fuzzdiff.paths.vmap.run`` does.
"""

from __future__ import annotations

import torch

from fuzzdiff.paths.vmap import Batch
from fuzzdiff.script.fragments import Fragment, _lines, register
from fuzzdiff.script.literals import tensor_literal

__all__ = ["vmap"]

# Plain-torch restatement of fuzzdiff.paths.vmap's machinery, for the script.
MACHINERY = '''
def example_of(index, i=None):
    """The example (seed variant) at a multi-index; for argument i, along the
    levels that do not batch it, always the first."""
    e = 0
    for (batch, in_dims, _), j in zip(LEVELS, index):
        e = e * batch + (j if i is None or in_dims[i] is not None else 0)
    return e


def args_at(index):
    """The arguments of the example at a multi-index, as the loop passes them."""
    return [EXAMPLES[example_of(index, i)][i] for i in range(len(ARG_NAMES))]


def stack_examples(value, dims):
    """Every example's value(index) in one tensor: level l's examples stacked at
    dims[l] (None: the value does not vary along level l); outermost stacked last."""
    def build(prefix):
        l = len(prefix)
        if l == len(LEVELS):
            return value(prefix)
        if dims[l] is None:
            return build(prefix + (0,))
        return torch.stack([build(prefix + (j,)) for j in range(LEVELS[l][0])], dims[l])
    return build(())


def out_dim(level, k, rank):
    """Output k's batch dim at a level, for examples of that rank (0 where it does not fit)."""
    d = level[2][k % len(level[2])]
    return d if -(rank + 1) <= d <= rank else 0


def out_dims_of(k, rank):
    return [out_dim(l, k, rank + len(LEVELS) - 1 - depth) for depth, l in enumerate(LEVELS)]


def stack_outputs(per_example, count, slot=lambda k: k):
    """The loop's results stacked as vmap stacks them."""
    first = per_example[INDICES[0]]
    return [stack_examples(lambda index: per_example[index][k], out_dims_of(slot(k), first[k].dim()))
            for k in range(count)]


def batched_outputs(g, out_dims, anchor):
    """g, with every output vmap moves to a nonzero out_dim made batched: torch
    mishandles an unbatched output with out_dim != 0 (garbage sizes for -1), so
    such an output gets an exact, batched zero added."""
    functorch = torch._C._functorch

    def wrapped(*xs):
        level = functorch.maybe_current_level()
        outs = list(g(*xs))
        for k, o in enumerate(outs):
            if out_dims[k] != 0 and functorch.maybe_get_level(o) != level:
                outs[k] = o + torch.zeros_like(xs[anchor], dtype=o.dtype).sum()
        return tuple(outs)
    return wrapped


def vmapped(g, in_dims, ranks):
    """g under every vmap level (in_dims[l]: level l's), outputs of per-example ranks."""
    for depth in reversed(range(len(LEVELS))):
        level = LEVELS[depth]
        inner = len(LEVELS) - 1 - depth
        out_dims = tuple(out_dim(level, k, r + inner) for k, r in enumerate(ranks))
        anchor = next(k for k, d in enumerate(in_dims[depth]) if d is not None)
        g = torch.func.vmap(batched_outputs(g, out_dims, anchor), in_dims=tuple(in_dims[depth]),
                            out_dims=out_dims)
    return g


def split_diff(args):
    """(the differentiable arguments, a function putting them back among the others)."""
    def merge(d):
        out = list(args)
        for i, t in zip(DIFF, d):
            out[i] = t
        return out
    return [args[i] for i in DIFF], merge


def f(*args):
    """The target's floating-point outputs, as a tuple (torch.func matches its structure)."""
    return tuple(outputs(call(*args)))


def with_vjp(*xs):
    """(*outputs, *grads) by torch.func.vjp; xs: the arguments, then the cotangents."""
    d, merge = split_diff(xs[:len(ARG_NAMES)])
    outs, pull = torch.func.vjp(lambda *d: f(*merge(d)), *d)
    return (*outs, *pull(tuple(xs[len(ARG_NAMES):])))


def with_grad(*xs):
    """(*grads, value) of sum_k <cotangent_k, output_k> by torch.func.grad_and_value."""
    d, merge = split_diff(xs[:len(ARG_NAMES)])

    def h(*d):
        return sum((c * o).sum() for c, o in zip(xs[len(ARG_NAMES):], f(*merge(d))))
    grads, value = torch.func.grad_and_value(h, argnums=tuple(range(len(d))))(*d)
    return (*grads, value)


def with_jvp(*xs):
    """(*outputs, *output tangents) by torch.func.jvp; xs: the arguments, then the tangents."""
    d, merge = split_diff(xs[:len(ARG_NAMES)])
    outs, tans = torch.func.jvp(lambda *d: f(*merge(d)), tuple(d), tuple(xs[len(ARG_NAMES):]))
    return (*outs, *tans)
'''.strip("\n")

BODIES = {
    "vmap": (
        "got = vmapped(f, IN_DIMS, ranks)(*BATCHED)",
        'names = [f"output {k}" for k in range(count)]',
        "want = stack_outputs(outs, count)",
    ),
    "vmap_vmap": (
        "got = vmapped(f, IN_DIMS, ranks)(*BATCHED)",
        'names = [f"output {k}" for k in range(count)]',
        "want = stack_outputs(outs, count)",
    ),
    "vmap_vjp": (
        "per_example = {index: with_vjp(*args_at(index), *COTANGENTS[index]) for index in INDICES}",
        "grad_ranks = [EXAMPLES[0][i].dim() for i in DIFF]",
        "cots = [stack_examples(lambda index: COTANGENTS[index][k], [0]) for k in range(count)]",
        "got = vmapped(with_vjp, [IN_DIMS[0] + [0] * count], ranks + grad_ranks)(*BATCHED, *cots)",
        'names = [f"output {k}" for k in range(count)] + [f"grad of {ARG_NAMES[i]}" for i in DIFF]',
        "want = stack_outputs(per_example, len(names))",
    ),
    "vmap_grad": (
        "per_example = {index: with_grad(*args_at(index), *COTANGENTS[index]) for index in INDICES}",
        "grad_ranks = [EXAMPLES[0][i].dim() for i in DIFF]",
        "cots = [stack_examples(lambda index: COTANGENTS[index][k], [0]) for k in range(count)]",
        "got = vmapped(with_grad, [IN_DIMS[0] + [0] * count], grad_ranks + [0])(*BATCHED, *cots)",
        'names = [f"grad of {ARG_NAMES[i]}" for i in DIFF] + ["<cotangent, output>"]',
        "want = stack_outputs(per_example, len(names))",
    ),
    "vmap_jvp": (
        "tangent_dims = [IN_DIMS[0][i] for i in DIFF]",
        "per_example = {index: with_jvp(*args_at(index), *TANGENTS[index]) for index in INDICES}",
        "tangents = [stack_examples(lambda index: BATCH_TANGENTS[index][k], [d]) if d is not None",
        "            else BATCH_TANGENTS[INDICES[0]][k] for k, d in enumerate(tangent_dims)]",
        "got = vmapped(with_jvp, [IN_DIMS[0] + tangent_dims], ranks + ranks)(*BATCHED, *tangents)",
        'names = [f"output {k}" for k in range(count)] + [f"output tangent {k}" for k in range(count)]',
        "want = stack_outputs(per_example, 2 * count)",
    ),
    "jvp_vmap": (
        "tangent_dims = [IN_DIMS[0][i] for i in DIFF]",
        "per_example = {index: with_jvp(*args_at(index), *TANGENTS[index]) for index in INDICES}",
        "tangents = [stack_examples(lambda index: BATCH_TANGENTS[index][k], [d]) if d is not None",
        "            else BATCH_TANGENTS[INDICES[0]][k] for k, d in enumerate(tangent_dims)]",
        "d, merge = split_diff(BATCHED)",
        "vf = vmapped(f, IN_DIMS, ranks)",
        "primal, tans = torch.func.jvp(lambda *d: vf(*merge(d)), tuple(d), tuple(tangents))",
        "got = (*primal, *tans)",
        'names = [f"output {k}" for k in range(count)] + [f"output tangent {k}" for k in range(count)]',
        "want = stack_outputs(per_example, 2 * count, lambda k: k % count)",
    ),
    "vjp_vmap": (
        "per_example = {index: with_vjp(*args_at(index), *COTANGENTS[index]) for index in INDICES}",
        "want = stack_outputs({index: w[:count] for index, w in per_example.items()}, count)",
        "for k, i in enumerate(DIFF):",
        "    dim = IN_DIMS[0][i]",
        "    grads = {index: w[count + k] for index, w in per_example.items()}",
        "    want.append(stack_examples(grads.__getitem__, [dim]) if dim is not None",
        "                else torch.stack(list(grads.values())).sum(0))",
        "cots = [stack_examples(lambda index: COTANGENTS[index][k], out_dims_of(k, ranks[k]))",
        "        for k in range(count)]",
        "d, merge = split_diff(BATCHED)",
        "vf = vmapped(f, IN_DIMS, ranks)",
        "primal, pull = torch.func.vjp(lambda *d: vf(*merge(d)), *d)",
        "got = [*primal, *pull(tuple(cots))]",
        'names = [f"output {k}" for k in range(count)] + [f"grad of {ARG_NAMES[i]}" for i in DIFF]',
    ),
}


def _tensors(mapping_name: str, items, doc: str) -> str:
    lines = [f"# {doc}", f"{mapping_name} = {{"]
    for key, tensors in items:
        lines.append(f"    {key!r}: [")
        lines += [f"        {tensor_literal(t, indent='        ')}," for t in tensors]
        lines.append("    ],")
    lines.append("}")
    return "\n".join(lines)


def _data(ctx) -> str:
    """The examples, batched arguments, cotangents and tangents, computed by fuzzdiff."""
    case, target = ctx.case, ctx.target
    b = Batch(target, case)
    loop = Batch(target, case)
    plan = b.plan
    examples = sorted({plan.example(index, i) for index in plan.indices for i in range(len(case.args))})
    levels = [(l.batch, list(l.in_dims), list(l.out_dims)) for l in plan.levels]
    blocks = [
        f"ARG_NAMES = {ctx.names!r}",
        f"DIFF = {b.diff!r}  # the differentiable arguments: {', '.join(ctx.names[i] for i in b.diff) or 'none'}",
        "# vmap levels, outermost first: (batch size, in_dims per argument, out_dims cycled over the outputs)",
        f"LEVELS = {levels!r}",
        "IN_DIMS = [in_dims for _, in_dims, _ in LEVELS]",
        "INDICES = list(itertools.product(*(range(batch) for batch, _, _ in LEVELS)))",
        _tensors(
            "EXAMPLES",
            [(e, loop.args(e)) for e in examples],
            "Example e's arguments as the loop passes them (each example its own values)",
        ),
        "# The batched arguments as vmap gets them: the examples stacked at in_dims, in the drawn layout",
        "BATCHED = [\n" + "".join(f"    {tensor_literal(t, indent='    ')},\n" for t in b.batched_args()) + "]",
    ]
    comp = plan.composition
    if comp in ("vmap_vjp", "vmap_grad", "vjp_vmap"):
        try:
            with torch.no_grad():
                cots = [(index, loop.cotangents(index, loop.f(*loop.args_at(index)))) for index in plan.indices]
            blocks.append(_tensors("COTANGENTS", cots, "Per-example cotangents, one per output"))
        except Exception as e:  # noqa: BLE001 - the script raises the same in its loop
            blocks.append(f"COTANGENTS = None  # the forward raised {type(e).__name__} when this was written")
    if comp in ("vmap_jvp", "jvp_vmap"):
        blocks.append(
            _tensors(
                "TANGENTS",
                [(index, [loop.tangent(i, plan.example(index, i)) for i in b.diff]) for index in plan.indices],
                "Per-example tangents, one per differentiable argument, for the loop",
            )
        )
        blocks.append(
            _tensors(
                "BATCH_TANGENTS",
                [(index, [b.tangent(i, plan.example(index, i)) for i in b.diff]) for index in plan.indices],
                "The same tangents, stacked for vmap",
            )
        )
    return "\n\n\n".join(blocks)


@register("vmap")
def vmap(ctx) -> Fragment:
    composition = ctx.case.params["composition"]
    return Fragment(
        f"torch.func.vmap ({composition}) vs a Python loop over the batch",
        _lines(
            "outs = {index: f(*args_at(index)) for index in INDICES}",
            "count = len(outs[INDICES[0]])",
            "ranks = [o.dim() for o in outs[INDICES[0]]]",
            f"# {composition}: vmapped, then the loop's results stacked the same way.",
            *BODIES[composition],
            "# Each result on its own scale.",
            "return finish([compare(names, [t.detach() for t in got], [t.detach() for t in want])])",
        ),
        ("outputs", "compare", "finish"),
        (),
        extra=f"{_data(ctx)}\n\n\n{MACHINERY}",
        inputs=False,
        imports=("import itertools",),
    )
