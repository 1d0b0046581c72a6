"""An OpInfo sample's call as a function of its fuzzed tensors, torch-only.

The OpInfo targets (fuzzdiff.targets.opinfo.build) run ``OpInfoCall`` objects,
and a record's standalone script copies this very source
(fuzzdiff.script.opinfo), so the script calls the op exactly as the checks
did. Everything here uses torch and the standard library alone: a script
imports nothing of fuzzdiff.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.utils._pytree as pytree

__all__ = ["OpInfoCall", "Differentiable", "unchanged", "unwrapped_output", "is_identity"]


class OpInfoCall:
    """A sample's call with its fuzzed tensors as positional arguments.

    ``leaves`` and ``spec`` are the sample's ``(input, args, kwargs)`` flattened;
    fuzzed argument ``i`` goes to leaf ``positions[i]`` (what ``leaves`` hold
    there is dropped), plus the sample tensor ``near[i]`` when that is not None.
    ``function(input, *args, **kwargs)`` is the op as OpInfo's tests call it,
    and ``output_fn`` the sample's processing of its output. Constant floating
    tensors follow the fuzzed dtype, so a float32 case does not mix dtypes the
    sample never mixed. The object itself is the function under test:
    torch.compile, given it, traces its leaves as inputs.
    """

    def __init__(self, function, spec, leaves, positions, near, output_fn):
        self.function = function
        self.spec = spec
        self.positions = tuple(positions)
        self.leaves = tuple(None if k in self.positions else leaf for k, leaf in enumerate(leaves))
        self.near = tuple(near)
        self.output_fn = output_fn

    def __call__(self, *tensors):
        # Fresh constants per call: some ops update them in place (batch_norm's running stats).
        # The sample was made in float64 on the CPU: its tensors, and an argument naming its
        # dtype (_softmax_backward_data's input_dtype), follow the fuzzed tensors.
        dtype, device = (tensors[0].dtype, tensors[0].device) if tensors else (torch.float64, None)
        leaves = [
            t.to(device, dtype if t.is_floating_point() else t.dtype, copy=True)
            if isinstance(t, torch.Tensor)
            else dtype
            if t is torch.float64
            else t
            for t in self.leaves
        ]  # fuzzed positions hold None
        for pos, t, s in zip(self.positions, tensors, self.near):
            leaves[pos] = t if s is None else t + s.to(t.device, t.dtype)
        inp, args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        return self.output_fn(self.function(inp, *args, **kwargs))


class Differentiable:
    """An ``output_fn`` that keeps only the output leaves autograd differentiates.

    Some ops return floating outputs that depend on the input but that torch
    declares non-differentiable (``output_differentiability`` in
    derivatives.yaml: native_batch_norm's save_mean / save_invstd,
    native_layer_norm's mean / rstd): they never require grad, and
    ``torch.autograd.gradcheck``, which OpInfo's own tests run, skips them. The
    checks take every floating output as part of the function, so finite
    differences would see a derivative that reverse mode, by contract, never
    has. ``keep[i]``: whether output leaf ``i`` stays.
    """

    def __init__(self, fn, keep):
        self.fn = fn
        self.keep = tuple(keep)

    def __call__(self, out):
        leaves = pytree.tree_leaves(self.fn(out))
        kept = tuple(o for o, k in zip(leaves, self.keep) if k)
        return kept[0] if len(kept) == 1 else kept


def unchanged(out):
    """The output as it is: most samples' output processing."""
    return out


def unwrapped_output(fn: Callable) -> tuple[Callable, tuple[bool, ...] | None]:
    """A call's output processing: the sample's own, and the outputs kept (``Differentiable``)."""
    if isinstance(fn, Differentiable):
        return fn.fn, fn.keep
    return fn, None


def is_identity(fn: Callable[[Any], Any]) -> bool:
    """``fn`` hands back what it is given (tried on a sentinel)."""
    sentinel = object()
    try:
        return fn(sentinel) is sentinel
    except Exception:  # noqa: BLE001 - it looks inside its argument: not the identity
        return False
