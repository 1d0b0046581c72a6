"""Random tangents and cotangents, and the inner products that contract them.

Directional identities (``<J^T v, u> == <v, J u>``) need a full Jacobian never;
one random ``u`` and ``v`` per example catch the same bugs with probability one.
The probes come from the case's params, so a replay uses the very same ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from fuzzdiff.case.values import Probe, probe_like

__all__ = ["probe", "probes_like", "directions", "dot", "absdot", "dot_and_scale", "widened", "PROBE_KEYS"]

PROBE_KEYS = ("cotangent", "direction", "second")


def probe(params: Mapping, key: str) -> Probe:
    """The Probe stored under ``params[key]`` (a fixed default when absent)."""
    spec = params.get(key)
    if spec is None:
        return Probe(seed=PROBE_KEYS.index(key) + 1 if key in PROBE_KEYS else 7)
    return Probe(**spec) if isinstance(spec, Mapping) else spec


def probes_like(params: Mapping, key: str, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """One probe tensor per tensor, each with its own stream of values."""
    spec = params.get(key)
    if type(spec) is dict:  # as drawn and stored: read, not rebuilt into a Probe per example
        # (Probe's class attributes are its field defaults)
        seed, layout, zeros = (
            spec.get("seed", Probe.seed),
            spec.get("layout", Probe.layout),
            spec.get("zeros", Probe.zeros),
        )
    else:
        base = probe(params, key)
        seed, layout, zeros = base.seed, base.layout, base.zeros
    # probe_like() reads only shape, dtype and device: no detach needed
    return [probe_like(seed + 7919 * k, layout, zeros, t) for k, t in enumerate(tensors)]


def directions(params: Mapping, leaves: Sequence[torch.Tensor], key: str = "direction") -> list[torch.Tensor]:
    """Tangent directions for the leaves, constant along a leaf's stride-0 dims.

    Forward AD cannot attach a full tangent to a stride-0 primal (make_dual
    copies it into the primal's layout, an overlapping write), so directions
    stay in the space that layout can represent; any direction is valid for a
    directional identity.
    """
    out = []
    for u, leaf in zip(probes_like(params, key, leaves), leaves):
        strides = leaf.stride()
        if 0 in strides:
            for d, (n, s) in enumerate(zip(leaf.shape, strides)):
                if s == 0 and n > 1:
                    u = u.narrow(d, 0, 1).expand_as(u)
        out.append(u)
    return out


def _wide(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if t.requires_grad:
        t = t.detach()
    return t if t.dtype is dtype else t.to(dtype)


def widened(ts: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor detached and in float64 (complex128 if complex): what the
    products below widen to anyway, for a tensor used in several of them."""
    return [_wide(t, _C128 if t.dtype.is_complex else _F64) for t in ts]


_F64, _C128 = torch.float64, torch.complex128


def _pairs(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> list:
    """Non-empty pairs, detached and widened to a common double type, and
    whether that is complex. (Called several times per example: kept lean.)"""
    out = []
    for x, y in zip(a, b):
        if x.numel():
            if x.dtype.is_complex or y.dtype.is_complex:
                out.append((_wide(x, _C128), _wide(y, _C128), True))
            else:
                out.append((_wide(x, _F64), _wide(y, _F64), False))
    return out


def dot(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    """``sum_i Re<a_i, b_i>`` in double precision."""
    total = 0.0
    for x, y, cplx in _pairs(a, b):
        total += float(torch.sum(x.conj() * y).real) if cplx else float(torch.sum(x * y))
    return total


def dot_and_scale(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> tuple[float, float]:
    """``dot(a, b)`` and ``absdot(a, b)`` in one pass."""
    total, scale = 0.0, 0.0
    for x, y, cplx in _pairs(a, b):
        p = x.conj() * y if cplx else x * y
        total += float(p.sum().real) if cplx else float(p.sum())
        scale += float(p.abs().sum())
    return total, scale


def absdot(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    """``sum_i <|a_i|, |b_i|>``: the scale a rounding error in ``dot`` is relative to."""
    total = 0.0
    for x, y, cplx in _pairs(a, b):
        # for reals |x * y| is |x| * |y| bit for bit (IEEE products are sign-symmetric)
        total += float(torch.sum(x.abs() * y.abs() if cplx else (x * y).abs()))
    return total
