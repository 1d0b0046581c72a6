"""Forward mode: Jacobian-vector products with dual tensors."""

from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.autograd.forward_ad as fwAD

__all__ = ["jvp", "same_layout"]


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
        tangent.as_strided(sizes, tangent.stride(), tangent.storage_offset()))
    return out


def jvp(f: Callable[..., Sequence[torch.Tensor]], leaves: Sequence[torch.Tensor],
        tangents: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Outputs of ``f`` at ``leaves`` and their tangents ``J u``."""
    with fwAD.dual_level():
        duals = [fwAD.make_dual(l, same_layout(l, u)) for l, u in zip(leaves, tangents)]
        outs = f(*duals)
        primals, tans = [], []
        for o in outs:
            p, t = fwAD.unpack_dual(o)
            primals.append(p)
            tans.append(torch.zeros_like(p) if t is None else t)
    return primals, tans
