"""A ModuleInput's forward as a function of its fuzzed tensors, torch-only.

The ModuleInfo targets (fuzzdiff.targets.moduleinfo.build) run ``ModuleCall``
objects: the module is built from the sample's constructor arguments, set to
training or eval mode, and called through ``torch.func.functional_call``
with the fuzzed parameters, so that every parameter is an argument of the
function under test (its layout, values, aliasing and dtype are fuzzed like
an input's) and vmap, compile and checkpoint see the parameters as inputs.
Everything here uses torch and the standard library alone.
"""

from __future__ import annotations

import torch
import torch.utils._pytree as pytree

__all__ = ["ModuleCall", "INIT_SEED"]

INIT_SEED = 0  # the module's own initialization (its buffers) is drawn under this seed


class ModuleCall:
    """``module(*args, **kwargs)`` of one ModuleInput, with its fuzzed tensors as
    positional arguments: first the forward's floating inputs (to forward leaf
    ``positions[i]``, in ``leaves``/``spec``, the forward's ``(args, kwargs)``
    flattened), then the parameters named in ``parameters``.

    Buffers (running statistics, ``num_batches_tracked``) are not arguments:
    they are the module's own, copied afresh per call, because a training-mode
    batch norm writes them in place, which would make the function mutate its
    inputs and each call see the previous one's statistics. The module is
    built once per dtype and device, under a fixed seed and outside
    torch.compile's tracing (only its buffers and constant attributes are
    read; every parameter is replaced), without drawing from torch's global
    generator, so a random module's seeded calls draw the same numbers.
    """

    def __init__(self, module_cls, args, kwargs, training, spec, leaves, positions, parameters):
        self.module_cls = module_cls
        self.args = tuple(args)
        self.kwargs = dict(kwargs)
        self.training = bool(training)
        self.spec = spec
        self.positions = tuple(positions)
        self.leaves = tuple(None if k in self.positions else leaf for k, leaf in enumerate(leaves))
        self.parameters = tuple(parameters)
        self._built: dict = {}

    @torch.compiler.disable
    def module(self, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
        """The module in ``dtype`` on ``device``, in its mode (built on first use)."""
        key = (dtype, str(device))
        if key not in self._built:
            # built outside any torch.func transform the first call may run under:
            # .to() sets param.data, which a transform forbids
            with torch._C._DisableFuncTorch(), torch.random.fork_rng(devices=[]):
                torch.manual_seed(INIT_SEED)
                module = self.module_cls(*self.args, **self.kwargs)
                self._built[key] = module.to(device=device, dtype=dtype).train(self.training)
        return self._built[key]

    def __call__(self, *tensors):
        dtype, device = tensors[0].dtype, tensors[0].device
        module = self.module(dtype, device)
        leaves = [
            t.to(device, dtype if t.is_floating_point() else t.dtype, copy=True) if isinstance(t, torch.Tensor) else t
            for t in self.leaves
        ]  # fuzzed positions hold None
        for pos, t in zip(self.positions, tensors):
            leaves[pos] = t
        args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        state = {name: b.clone() for name, b in module.named_buffers()}
        state.update(zip(self.parameters, tensors[len(self.positions) :]))
        return torch.func.functional_call(module, state, tuple(args), kwargs)
