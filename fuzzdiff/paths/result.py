"""What a path computed: tensors by name, outputs first.

Every path returns Results (one per side it computes), so that a check
compares any two of them one way (fuzzdiff.confirm.compare.result_discrepancy) and a
replay compares a Result with itself run again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["Result", "outputs_and"]


@dataclass(frozen=True)
class Result:
    """names[k] says what tensors[k] is ("output 0", "grad of argument 1", ...).
    ``skipped`` is non-empty where the path could not run (its reason), and
    then ``tensors`` is empty."""

    names: tuple[str, ...]
    tensors: tuple[torch.Tensor, ...]
    skipped: str = ""

    def __post_init__(self) -> None:
        if len(self.names) != len(self.tensors) and not self.skipped:
            raise ValueError(f"{len(self.names)} names for {len(self.tensors)} tensors")

    @classmethod
    def of(cls, names: Sequence[str], tensors: Sequence[torch.Tensor]) -> Result:
        return cls(tuple(names), tuple(t.detach() for t in tensors))

    @classmethod
    def not_run(cls, names: Sequence[str], why: str) -> Result:
        return cls(tuple(names), (), why)

    def __iter__(self):
        # names, tensors = result: the pair most callers compare
        return iter((list(self.names), list(self.tensors)))

    def cpu(self) -> Result:
        return Result(self.names, tuple(t.cpu() for t in self.tensors), self.skipped)


def outputs_and(
    outputs: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], grad_names: Sequence[str] | None = None
) -> Result:
    """Outputs, then gradients: the Result of a forward and a backward."""
    names = [f"output {k}" for k in range(len(outputs))]
    names += list(grad_names) if grad_names is not None else [f"grad {k}" for k in range(len(grads))]
    return Result.of(names, [*outputs, *grads])
