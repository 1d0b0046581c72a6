"""alias: aliased arguments behave like independent copies of their values.

For a functional target, arguments that share memory (the same tensor twice,
overlapping or disjoint views of one storage, a non-leaf view of a leaf) must
give the outputs that clones of them give; and the gradient of each shared
leaf must be the sum of the clones' gradients scattered back to the storage
positions each argument reads.
"""

from __future__ import annotations

import torch

from fuzzdiff.case.case import Case
from fuzzdiff.case.directions import probes_like
from fuzzdiff.case.materialize import Inputs
from fuzzdiff.checks.check import Check, Cost, OpInfoRole, probe_params
from fuzzdiff.checks.fragment import Fragment, ScriptContext, lines
from fuzzdiff.checks.twins import judge_twins
from fuzzdiff.paths.eager import evaluate
from fuzzdiff.paths.function import leaf_function
from fuzzdiff.paths.result import Result, outputs_and
from fuzzdiff.paths.reverse import vjp
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict


def scatter_to_storage(grad: torch.Tensor, shape, strides, offset: int, out: torch.Tensor) -> None:
    """Add ``grad`` of a strided view into the flat storage gradient ``out``,
    with explicit indices rather than autograd's own as_strided backward."""
    index = torch.arange(out.numel(), device=out.device).as_strided(tuple(shape), tuple(strides), offset)
    out.index_add_(0, index.reshape(-1), grad.reshape(-1).to(out.dtype))


def through_clones(call, args, leaves, sources, cotangents) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Outputs from independent clones of ``args``, and the clones' gradients
    mapped onto the leaves. ``sources[i]``: None for an argument that is not
    differentiable, else (its leaf, None for the leaf itself or the (strides,
    offset) of the view of the leaf's storage it is)."""
    clones = [a.detach().clone().requires_grad_() if src is not None else a for a, src in zip(args, sources)]
    outs = call(clones)
    diff = [c for c, src in zip(clones, sources) if src is not None]
    grads = iter(vjp(outs, diff, cotangents(outs)) if diff else [])
    expected = [torch.zeros_like(l.detach()).contiguous() for l in leaves]
    for i, src in enumerate(sources):
        if src is None:
            continue
        g = next(grads)
        k, view = src
        if view is None:
            expected[k] = expected[k] + g
        else:
            strides, offset = view
            scatter_to_storage(g, args[i].shape, strides, offset, expected[k])
    return [o.detach() for o in outs], expected


def sources(inputs: Inputs) -> list[tuple[int, tuple | None] | None]:
    """Each argument's leaf, and where in the leaf's storage it reads (through_clones)."""
    return [
        None if src is None else (src[0], None if src[1] is None else (src[1].strides, src[1].offset))
        for src in inputs.sources
    ]


def cloned(target: Target, case: Case, cast=None) -> Result:
    """Outputs from independent clones, and their gradients mapped onto the leaves."""
    # A fresh materialization, not the aliased run's tensors: a target that
    # (wrongly) writes into its inputs must not hand the clones clobbered values.
    f = leaf_function(target, case, cast=cast)
    outs, expected = through_clones(
        f.call_args, f.args, f.leaves, sources(f.inputs), lambda o: probes_like(case.params, "cotangent", o)
    )
    return outputs_and(outs, expected)


def run(target: Target, case: Case) -> Verdict:
    return judge_twins(
        "aliased arguments vs clones",
        target,
        case,
        lambda c, cast=None: evaluate(target, c, cast=cast),
        lambda c, cast=None: cloned(target, c, cast=cast),
        check="alias",
    )


def _functional(target: Target) -> str | None:
    return None if target.functional else "the target mutates its inputs; aliasing changes its meaning"


def script(ctx: ScriptContext) -> Fragment:
    return Fragment(
        "aliased arguments vs independent clones: the same outputs, and each shared "
        "leaf's gradient is the sum of the clones' gradients",
        lines(
            "# 1. As fuzzed: arguments share memory; gradients with respect to the leaves.",
            "leaves = make_leaves()",
            "outs = f(*leaves)",
            "got = [t.detach() for t in (*outs, *vjp(outs, leaves, V))]",
            'names = [f"output {k}" for k in range(len(outs))] + [f"grad of {n}" for n in LEAF_NAMES]',
            "# 2. Independent clones of the arguments; each clone's gradient is added to",
            "#    its leaf's gradient at the storage positions that argument reads.",
            "leaves = make_leaves()",
            "outs, expected = through_clones(lambda args: outputs(call(*args)), make_args(leaves), leaves,",
            "                                SOURCES, lambda outs: V)",
            "return finish([compare(names, got, [*outs, *expected])])",
        ),
        ("f", "outputs", "compare", "finish"),
        ("V",),
        extra=f"{ctx.wrt_constants()}\n# each argument's leaf, and (strides, offset) where it views that storage\n"
        f"SOURCES = {sources(ctx.case.materialize(requires_grad=False))!r}",
        copies=(vjp, through_clones),
    )


CHECK = Check(
    "alias",
    run,
    params=probe_params("cotangent"),
    applies=_functional,
    aliasing="required",
    script=script,
    cost=Cost(0.018, 0.0031),
    opinfo=OpInfoRole(),
)
