"""Shared helpers for the unit tests: small targets, search settings, tensor facts."""

from __future__ import annotations

import inspect
import math

import torch
from hypothesis import HealthCheck, find, settings

from fuzzdiff.targets.target import Target

# Searches that must reach a feature: enough examples, no database, no deadline.
SEARCH = settings(max_examples=3000, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))


def reach(strategy, condition, max_examples: int = 3000):
    """``hypothesis.find`` with generous settings; NoSuchExample fails the test."""
    return find(strategy, condition,
                settings=settings(SEARCH, max_examples=max_examples))


def target(spec: str, fn=None, name: str | None = None, **kw) -> Target:
    """A throwaway target over ``spec``; its function adds all arguments' sums."""
    if fn is None:
        def fn(*args):
            return sum(a.sum() for a in args)
    return Target(name or f"unit[{spec}]", fn, spec, **kw)


class WrongSquare(torch.autograd.Function):
    """x**2 whose backward says 3 x: a planted bug in the user's own derivative rule."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * g * x


# WrongSquare as source, for the modules tests write to disk, whose targets a worker or a
# fresh process imports by name: the same planted bug, and a class to derive variants from.
WRONG_SQUARE = "import torch\n\n\n" + inspect.getsource(WrongSquare)


UNARY = target("x: ...", torch.exp, "unit_exp")
UNARY4 = target("x: a b c d", torch.exp, "unit_exp4", min_side=2, max_side=3)
MATRIX = target("x: n m", torch.exp, "unit_exp2", min_side=1)
PAIR = target("x: n m, y: n m", torch.add, "unit_add")
TRIPLE = target("x: n, y: n, z: n", lambda x, y, z: x * y + z, "unit_fma", min_side=1)


def offsets(t: torch.Tensor) -> set[int]:
    """Storage element indices a tensor's elements live at (small tensors only)."""
    if t.numel() == 0:
        return set()
    idx = torch.zeros((), dtype=torch.int64)
    for n, s in zip(t.shape, t.stride()):
        idx = idx.unsqueeze(-1) + torch.arange(n) * s
    return {int(i) + t.storage_offset() for i in idx.reshape(-1)}


def storage_ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same storage and at least one shared element."""
    return storage_ptr(a) == storage_ptr(b) and bool(offsets(a) & offsets(b))


_INT = {torch.float64: torch.int64, torch.float32: torch.int32,
        torch.float16: torch.int16, torch.bfloat16: torch.int16}


def bits(t: torch.Tensor) -> torch.Tensor:
    """An integer tensor of the exact bit patterns (nan payloads and -0 included)."""
    t = t.detach().contiguous()
    if t.is_complex():
        t = torch.view_as_real(t).contiguous()
    if t.dtype in _INT:
        return t.view(_INT[t.dtype])
    return t


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.shape == b.shape and a.dtype == b.dtype
            and torch.equal(bits(a), bits(b)))


def nan_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """torch.equal, with nan equal to nan."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.detach(), b.detach()
    if a.dtype.is_floating_point or a.is_complex():
        na, nb = a.isnan(), b.isnan()
        return torch.equal(na, nb) and torch.equal(a[~na], b[~nb])
    return torch.equal(a, b)


def numel(shape) -> int:
    return math.prod(shape)
