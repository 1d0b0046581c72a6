"""Two bugs of the kinds a campaign once could not reach, planted as targets.

Importing this module registers them beside the catalog, so that
``python bench/campaign.py --plant`` runs the default campaign with them and
says when each was found:

- ``planted_expanded_sum``: a sum over the last dim whose backward is twice
  too large only where that dim is stride 0 (an expanded input), the layout
  a pair's first batch now tours;
- ``planted_batched_scalar``: ``x * s`` for a 0-dim tensor ``s``, whose
  derivative in ``s`` is lost only where vmap batches ``s`` (a number OpInfo
  passes as a Python float, fuzzed as a tensor).
"""

from __future__ import annotations

import torch

from fuzzdiff.targets import register
from fuzzdiff.targets.target import Target

_functorch = torch._C._functorch


class ExpandedSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.shape, ctx.expanded = x.shape, x.shape[-1] > 1 and x.stride(-1) == 0
        return x.sum(-1)

    @staticmethod
    def backward(ctx, g):
        grad = g.unsqueeze(-1).expand(ctx.shape)
        return 2 * grad if ctx.expanded else grad


def _batched(t: torch.Tensor) -> bool:
    while _functorch.is_functorch_wrapped_tensor(t):
        if _functorch.is_batchedtensor(t):
            return True
        t = _functorch.get_unwrapped(t)
    return False


def planted_scale(x, s):
    return x * (s.detach() if _batched(s) else s)


EXPANDED_SUM = Target(
    "planted_expanded_sum", ExpandedSum.apply, "x: m n", "planted", origin="bench.planted:EXPANDED_SUM", max_side=3
)
BATCHED_SCALAR = Target("planted_batched_scalar", planted_scale, "x: n, s:", "planted", origin="bench.planted:BATCHED_SCALAR")
PLANTED = (EXPANDED_SUM, BATCHED_SCALAR)
register(*PLANTED)
