"""The vmap check's script fragment: torch.func.vmap (and its compositions) vs a loop.

The script embeds every example's arguments as the loop passes them, the
batched arguments exactly as vmap got them (stacked at in_dims, in the drawn
memory layout), and the per-example cotangents and tangents; it then runs the
plan's composition both ways with ``fuzzdiff.paths.vmap.vmap_and_loop``,
copied: the very function the check ran.
"""

from __future__ import annotations

import torch

from fuzzdiff.checks.fragment import lines
from fuzzdiff.paths.vmap import Batch, Level, vmap_and_loop
from fuzzdiff.script.fragments import Fragment, register
from fuzzdiff.script.literals import tensor_literal

__all__ = ["vmap"]

# The script's access to its embedded examples; the compositions themselves
# are fuzzdiff.paths.vmap's, copied.
EXAMPLES_ACCESS = '''
def example_of(index, i=None):
    """The example (seed variant) at a multi-index; for argument i, along the
    levels that do not batch it, always the first."""
    e = 0
    for level, j in zip(LEVELS, index):
        e = e * level.batch + (j if i is None or level.in_dims[i] is not None else 0)
    return e


def args_at(index):
    """The arguments of the example at a multi-index, as the loop passes them."""
    return [EXAMPLES[example_of(index, i)][i] for i in range(len(ARG_NAMES))]


def f(*args):
    """The target's floating-point outputs, as a tuple (torch.func matches its structure)."""
    return tuple(outputs(call(*args)))
'''.strip("\n")


def _tensors(mapping_name: str, items, doc: str, on_device: bool) -> str:
    out = [f"# {doc}", f"{mapping_name} = {{"]
    for key, tensors in items:
        out.append(f"    {key!r}: [")
        out += [f"        {tensor_literal(t, indent='        ', on_device=on_device)}," for t in tensors]
        out.append("    ],")
    out.append("}")
    return "\n".join(out)


def _data(ctx) -> str:
    """The examples, batched arguments, cotangents and tangents, computed by fuzzdiff."""
    case, target = ctx.case, ctx.target
    b = Batch(target, case)
    loop = Batch(target, case)
    plan = b.plan
    examples = sorted({plan.example(index, i) for index in plan.indices for i in range(len(case.args))})
    levels = "".join(f"    {l!r},\n" for l in plan.levels)
    blocks = [
        f"ARG_NAMES = {ctx.names!r}",
        f"DIFF = {b.diff!r}  # the differentiable arguments: {', '.join(ctx.names[i] for i in b.diff) or 'none'}",
        "# vmap levels, outermost first: batch size, in_dims per argument, out_dims cycled over the outputs",
        f"LEVELS = [\n{levels}]",
        _tensors(
            "EXAMPLES",
            [(e, loop.args(e)) for e in examples],
            "Example e's arguments as the loop passes them (each example its own values)",
            ctx.on_device,
        ),
        "# The batched arguments as vmap gets them: the examples stacked at in_dims, in the drawn layout",
        "BATCHED = [\n"
        + "".join(f"    {tensor_literal(t, indent='    ', on_device=ctx.on_device)},\n" for t in b.batched_args())
        + "]",
    ]
    comp = plan.composition
    if comp in ("vmap_vjp", "vmap_grad", "vjp_vmap"):
        try:
            with torch.no_grad():
                cots = [(index, loop.cotangents(index, loop.f(*loop.args_at(index)))) for index in plan.indices]
            blocks.append(_tensors("COTANGENTS", cots, "Per-example cotangents, one per output", ctx.on_device))
        except Exception as e:  # noqa: BLE001 - the script raises the same in its loop
            blocks.append(f"COTANGENTS = None  # the forward raised {type(e).__name__} when this was written")
    if comp in ("vmap_jvp", "jvp_vmap"):
        blocks.append(
            _tensors(
                "TANGENTS",
                [(index, [loop.tangent(i, plan.example(index, i)) for i in b.diff]) for index in plan.indices],
                "Per-example tangents, one per differentiable argument, for the loop",
                ctx.on_device,
            )
        )
        blocks.append(
            _tensors(
                "BATCH_TANGENTS",
                [(index, [b.tangent(i, plan.example(index, i)) for i in b.diff]) for index in plan.indices],
                "The same tangents, stacked for vmap",
                ctx.on_device,
            )
        )
    return "\n\n\n".join(blocks)


@register("vmap")
def vmap(ctx) -> Fragment:
    composition = ctx.case.params["composition"]
    reverse = composition in ("vmap_vjp", "vmap_grad", "vjp_vmap")
    forward = composition in ("vmap_jvp", "jvp_vmap")
    probes = (
        "lambda index, outs: COTANGENTS[index]" if reverse else "None",
        "TANGENTS.__getitem__" if forward else "None",
        "BATCH_TANGENTS.__getitem__" if forward else "None",
    )
    return Fragment(
        f"torch.func.vmap ({composition}) vs a Python loop over the batch",
        lines(
            f"# {composition}: vmapped, and the loop's results stacked the same way.",
            f"names, got, want = vmap_and_loop({composition!r}, f, LEVELS, DIFF, ARG_NAMES, args_at, BATCHED,",
            f"                                 {', '.join(probes)})",
            "# Each result on its own scale.",
            "return finish([compare(names, [t.detach() for t in got], [t.detach() for t in want])])",
        ),
        ("outputs", "compare", "finish"),
        (),
        extra=f"{_data(ctx)}\n\n\n{EXAMPLES_ACCESS}",
        inputs=False,
        copies=(Level, vmap_and_loop),
    )
