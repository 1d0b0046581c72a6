"""alias: aliased arguments behave like independent copies of their values.

For a functional target, arguments that share memory (the same tensor twice,
overlapping or disjoint views of one storage, a non-leaf view of a leaf) must
give the outputs that clones of them give; and the gradient of each shared
leaf must be the sum of the clones' gradients scattered back to the storage
positions each argument reads.
"""

from __future__ import annotations

import torch

from fuzzdiff.case import Case, Layout
from fuzzdiff.checks.check import Check, probe_params
from fuzzdiff.checks.twins import judge_twins
from fuzzdiff.directions import probes_like
from fuzzdiff.paths.eager import evaluate
from fuzzdiff.paths.function import leaf_function
from fuzzdiff.paths.result import Result, outputs_and
from fuzzdiff.paths.reverse import vjp
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict


def scatter_to_storage(grad: torch.Tensor, shape, layout: Layout, out: torch.Tensor) -> None:
    """Add ``grad`` of a strided view into the flat storage gradient ``out``,
    with explicit indices rather than autograd's own as_strided backward."""
    index = torch.arange(layout.storage_size, device=out.device).as_strided(tuple(shape), layout.strides, layout.offset)
    out.index_add_(0, index.reshape(-1), grad.reshape(-1).to(out.dtype))


def cloned(target: Target, case: Case, cast=None) -> Result:
    """Outputs from independent clones, and their gradients mapped onto the leaves."""
    # A fresh materialization, not the aliased run's tensors: a target that
    # (wrongly) writes into its inputs must not hand the clones clobbered values.
    f = leaf_function(target, case, cast=cast)
    clones = [a.detach().clone().requires_grad_() if src is not None else a for a, src in zip(f.args, f.inputs.sources)]
    outs = f.call_args(clones)
    v = probes_like(case.params, "cotangent", outs)
    diff = [c for c, src in zip(clones, f.inputs.sources) if src is not None]
    grads = iter(vjp(outs, diff, v) if diff else [])
    expected = [torch.zeros_like(l.detach()).contiguous() for l in f.leaves]
    for i, src in enumerate(f.inputs.sources):
        if src is None:
            continue
        g = next(grads)
        k, layout = src
        if layout is None:
            expected[k] = expected[k] + g
        else:
            scatter_to_storage(g, f.args[i].shape, layout, expected[k])
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


CHECK = Check("alias", run, params=probe_params("cotangent"), applies=_functional, aliasing="required")
