"""A target at a case as a pure function of its differentiable leaves."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.utils._pytree import tree_leaves

from fuzzdiff.case.case import Case
from fuzzdiff.case.materialize import Inputs
from fuzzdiff.targets.target import Target

__all__ = ["LeafFunction", "leaf_function", "differentiable"]


def differentiable(t) -> bool:
    return isinstance(t, torch.Tensor) and (t.dtype.is_floating_point or t.dtype.is_complex)


@dataclass
class LeafFunction:
    """``f(*leaves) -> tuple of floating outputs``, plus the leaves it was built at."""

    target: Target
    case: Case
    inputs: Inputs

    @property
    def leaves(self) -> list[torch.Tensor]:
        return self.inputs.leaves

    @property
    def args(self) -> list[torch.Tensor]:
        return self.inputs.args

    def call_args(self, args: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        out = self.target.fn(*args, **self.case.kwargs)
        return tuple(t for t in tree_leaves(out) if differentiable(t))

    def __call__(self, *leaves: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.call_args(self.inputs.rebuild(leaves))


def leaf_function(
    target: Target, case: Case, *, cast: torch.dtype | None = None, requires_grad: bool = True, storages=None
) -> LeafFunction:
    """Materialize ``case`` (optionally with floating storages cast, e.g. to a
    float64 reference that holds exactly the same values) as a LeafFunction.
    ``storages`` (``case.storages()``) shares one draw of the values between calls."""
    return LeafFunction(target, case, case.materialize(requires_grad=requires_grad, cast=cast, storages=storages))
