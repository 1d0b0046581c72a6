"""A module target: a Target with a builder, ``target.module(*sample,
**kwargs) -> nn.Module``, whose ``fn`` is ``one_sample``,
the module on a batch of one sample. Its per-sample gradients are the
per_sample check's subject (fuzzdiff.paths.expanded); the other checks fuzz
``fn``, an ordinary function of one sample."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils._pytree import tree_leaves

from fuzzdiff.targets.target import Target

__all__ = ["batch_dims", "one_sample", "is_module_target", "module_builder"]


def batch_dims(module: torch.nn.Module) -> tuple[int, tuple[int, ...]]:
    """The batch dim of the module's inputs, and of its outputs in order (the
    last repeats): an RNN's output follows batch_first, its h_n and c_n have
    the batch at dim 1 either way."""
    d = 0 if getattr(module, "batch_first", True) else 1
    if isinstance(module, torch.nn.RNNBase):
        return d, (d, 1)
    return d, (d,)


def one_sample(module: torch.nn.Module, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The module on a batch of one sample, batch dims removed: f(x_b)."""
    d, out_dims = batch_dims(module)
    outs = tree_leaves(module(*[a.unsqueeze(d) for a in args]))
    return tuple(o.select(out_dims[min(k, len(out_dims) - 1)], 0) for k, o in enumerate(outs))


def is_module_target(target: Target) -> bool:
    return target.module is not None


def module_builder(target: Target) -> Callable[..., torch.nn.Module]:
    """A module target's builder, ``target.module``."""
    if target.module is None:
        raise TypeError(f"target {target.name!r} is not a module target: it has no module builder")
    return target.module
