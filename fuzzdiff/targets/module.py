"""A module target: a Target with a builder, ``target.module(*sample,
**kwargs) -> nn.Module`` (``Target.build_module``), whose ``fn`` is
``one_sample``, the module on a batch of one sample. Its per-sample gradients
are the per_sample check's subject (fuzzdiff.paths.expanded); the other checks
fuzz ``fn``, an ordinary function of one sample."""

from __future__ import annotations

import torch
from torch.utils._pytree import tree_leaves

__all__ = ["batch_dims", "one_sample"]


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
