"""Forward mode: Jacobian-vector products with dual tensors."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import torch
import torch.autograd.forward_ad as fwAD
from torch.utils._python_dispatch import TorchDispatchMode

from fuzzdiff.verdict import Unsupported

__all__ = ["jvp", "same_layout", "NO_FORWARD_RULE"]

# torch's own operator namespaces; any other is a torch.library op of a user's
# (a tuple, so that a standalone script can hold this very value)
NATIVE_NAMESPACES = (
    "aten",
    "prims",
    "prim",
    "quantized",
    "_quantized",
    "mkldnn",
    "mkl",
    "onednn",
    "_c10d_functional",
    "c10d",
    "profiler",
    "inductor",
    "debugprims",
    "rngprims",
    "higher_order",
    "_nested_tensor",
    "fbgemm",
    "_test",
    "cuda",
    "xpu",
    "mps",
)
NO_FORWARD_RULE = (
    "forward mode through torch.library op(s) {ops}: an op whose autograd is register_autograd "
    "has no forward-mode rule, and torch gives its outputs zero tangents silently instead of "
    "raising (torch.func.jvp returns zeros; a known torch behaviour, corpus/forward/custom_sin). "
    "Not a bug of the op: forward mode is unsupported for it"
)


def same_layout(primal: torch.Tensor, tangent: torch.Tensor) -> torch.Tensor:
    """``tangent`` stored with exactly ``primal``'s sizes, strides, offset and storage size.

    make_dual copies a tangent whose metadata differs into the primal's layout;
    for a stride-0 primal that copy is an overlapping write and raises, even
    when the tangent is itself constant along those dims. Handing it a tangent
    with identical metadata avoids the copy.
    """
    tangent = tangent.to(primal.dtype)
    if 0 not in primal.stride():
        return tangent
    numel = primal.untyped_storage().nbytes() // primal.element_size()
    out = primal.new_zeros(numel).as_strided(primal.shape, primal.stride(), primal.storage_offset())
    sizes = [min(n, 1) if s == 0 else n for n, s in zip(primal.shape, primal.stride())]
    out.as_strided(sizes, out.stride(), out.storage_offset()).copy_(
        tangent.as_strided(sizes, tangent.stride(), tangent.storage_offset())
    )
    return out


def jvp(
    f: Callable[..., Sequence[torch.Tensor]], leaves: Sequence[torch.Tensor], tangents: Sequence[torch.Tensor]
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Outputs of ``f`` at ``leaves`` and their tangents ``J u``."""
    with fwAD.dual_level():
        duals = [fwAD.make_dual(l, same_layout(l, u)) for l, u in zip(leaves, tangents)]
        outs = f(*duals)
        primals, tans = [], []
        missing = False
        for o in outs:
            p, t = fwAD.unpack_dual(o)
            primals.append(p)
            missing = missing or (t is None and (p.is_floating_point() or p.is_complex()))
            tans.append(torch.zeros_like(p) if t is None else t)
    if missing and any(u.count_nonzero() for u in tangents):
        ops = library_ops(f, leaves)
        if ops:
            message = NO_FORWARD_RULE.format(ops=", ".join(sorted(ops)))
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            raise Unsupported(message)
    return primals, tans


class _OpSpy(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        namespace = getattr(func, "namespace", "aten")
        if namespace not in NATIVE_NAMESPACES:
            self.ops.add(str(func.name()).removesuffix(".default"))
        return func(*args, **(kwargs or {}))


def library_ops(f: Callable[..., Sequence[torch.Tensor]], leaves: Sequence[torch.Tensor]) -> set[str]:
    """The non-native (torch.library) operators that ``f`` calls at ``leaves``:
    an output without a tangent is torch's silence about such an op."""
    with torch.no_grad(), _OpSpy() as spy:
        f(*[l.detach() for l in leaves])
    return spy.ops
