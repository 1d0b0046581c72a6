"""A function that reads its dtype's own constants is another function in each dtype.

``eps = torch.finfo(x.dtype).eps`` guards a quotient or a logarithm: ``n /
(d + eps)``, ``log10((s + eps) / (r + eps))``. Where the guarded quantity is
far below eps (the residual of a perfect estimate, exactly zero; the energy
of a zero signal), the guard decides the value: SI-SDR is then ``10 log10(s /
eps)``, about 161 dB in float64 and 74 dB in float32, 87 dB apart however
exactly each dtype computes. Float64 on the same values is no reference for
float32 there; float64 with float32's constants in their place is.

``LowDtypeConstants`` runs a float64 computation so: every number an op
receives (``x + eps``, ``clamp(x, min=eps)``, ``full_like(x, eps)``), and
every constant tensor made of such numbers (``torch.tensor(eps)``), that
equals float64's eps or smallest normal value becomes the low dtype's, and
it records which it met. Only those exact values are replaced: a constant of
the function's own (``1e-15``, ``1e-8``) is the same in every dtype, and so
is the function. fuzzdiff.confirm.low_precision asks it where a
low-precision mismatch survives the inputs' rounding.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from fuzzdiff.confirm.ladder import on_time

__all__ = ["LowDtypeConstants", "CONSTANTS"]

CONSTANTS = ("eps", "tiny")  # the torch.finfo fields a guard is made of

_HIGH = (torch.float64, torch.complex128)
# ops that turn a tensor made outside the dispatcher (torch.tensor(eps)) into a constant of the graph
_LIFTS = (torch.ops.aten.lift_fresh.default, torch.ops.aten.lift_fresh_copy.default)


class LowDtypeConstants(TorchDispatchMode):
    """Float64 with ``dtype``'s eps and smallest normal value where float64's
    reach an op. ``met``: the names (CONSTANTS) of those it replaced."""

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        high, low = torch.finfo(torch.float64), torch.finfo(dtype)
        self.swaps = {float(getattr(high, name)): (name, float(getattr(low, name))) for name in CONSTANTS}
        self.met: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        on_time()  # one run of the target, op by op, within the climb's allowance
        args, kwargs = tree_map(self._number, (args, kwargs or {}))
        if func in _LIFTS:
            args = tree_map(self._constant, args)
        return func(*args, **kwargs)

    def _number(self, x):
        if type(x) is float and x in self.swaps:
            name, low = self.swaps[x]
            self.met.add(name)
            return low
        return x

    def _constant(self, t):
        if not isinstance(t, torch.Tensor) or t.dtype not in _HIGH or not t.numel():
            return t
        for value, (name, low) in self.swaps.items():
            hit = t == value
            if bool(hit.any()):
                self.met.add(name)
                t = torch.where(hit, torch.full_like(t, low), t)
        return t

    def named(self, dtype: torch.dtype) -> str:
        """What was met, in words: "eps (2.22e-16 in float64, 1.19e-07 in float32)"."""
        low = str(dtype).removeprefix("torch.")
        return ", ".join(
            f"{name} ({high:.3g} in float64, {value:.3g} in {low})"
            for high, (name, value) in self.swaps.items()
            if name in self.met
        )
