"""Eager reverse mode: outputs, and gradients with respect to leaves or arguments."""

from __future__ import annotations

import torch

from fuzzdiff.case.case import Case
from fuzzdiff.case.directions import probes_like
from fuzzdiff.paths.function import leaf_function
from fuzzdiff.paths.result import Result, outputs_and
from fuzzdiff.paths.reverse import vjp
from fuzzdiff.targets.target import Target

__all__ = ["evaluate"]


def evaluate(target: Target, case: Case, *, cast: torch.dtype | None = None, wrt: str = "leaves") -> Result:
    """Run forward and backward with the case's cotangent probe.

    ``wrt="args"`` differentiates with respect to every differentiable argument
    as passed (views included), so two cases with the same logical values but
    other layouts or leaves give comparable gradients.
    """
    f = leaf_function(target, case, cast=cast)
    if wrt == "leaves":
        inputs = f.leaves
        outs = f(*inputs)
    elif wrt == "args":
        inputs = [a for a, src in zip(f.args, f.inputs.sources) if src is not None]
        outs = f.call_args(f.args)
    else:
        raise ValueError(f"wrt must be 'leaves' or 'args', got {wrt!r}")
    v = probes_like(case.params, "cotangent", outs)
    grads = vjp(outs, inputs, v) if inputs else []
    return outputs_and(outs, grads)
