"""Eager reverse mode: outputs, and gradients with respect to leaves or arguments."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fuzzdiff.case import Case
from fuzzdiff.directions import probes_like
from fuzzdiff.paths.function import LeafFunction, leaf_function
from fuzzdiff.paths.reverse import vjp
from fuzzdiff.targets.target import Target

__all__ = ["Evaluation", "evaluate"]


@dataclass
class Evaluation:
    outputs: tuple[torch.Tensor, ...]
    grads: list[torch.Tensor]
    function: LeafFunction | None  # None: outputs of no LeafFunction (another backend's)

    def tensors(self) -> tuple[list[str], list[torch.Tensor]]:
        """Names and tensors of everything evaluated, outputs first."""
        names = [f"output {k}" for k in range(len(self.outputs))]
        names += [f"grad {k}" for k in range(len(self.grads))]
        return names, [*self.outputs, *self.grads]


def evaluate(target: Target, case: Case, *, cast: torch.dtype | None = None, wrt: str = "leaves") -> Evaluation:
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
    return Evaluation(tuple(o.detach() for o in outs), [g.detach() for g in grads], f)
