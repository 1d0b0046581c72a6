"""Forward mode: Jacobian-vector products with dual tensors."""

from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.autograd.forward_ad as fwAD

__all__ = ["jvp"]


def jvp(f: Callable[..., Sequence[torch.Tensor]], leaves: Sequence[torch.Tensor],
        tangents: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Outputs of ``f`` at ``leaves`` and their tangents ``J u``."""
    with fwAD.dual_level():
        duals = [fwAD.make_dual(l, u.to(l.dtype)) for l, u in zip(leaves, tangents)]
        outs = f(*duals)
        primals, tans = [], []
        for o in outs:
            p, t = fwAD.unpack_dual(o)
            primals.append(p)
            tans.append(torch.zeros_like(p) if t is None else t)
    return primals, tans
