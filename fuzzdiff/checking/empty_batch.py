"""A torch op that raises at an empty batch: torch's bug, not a domain to declare.

PyTorch's ops take empty tensors: a batch of none gives a result of none (numpy
does the same). A CPU FFT of an empty batch raises an MKL error instead, and
to the input-domain logic (fuzzdiff.checking.input_domain) that looked like a
function refusing an input, with advice (``invalid=``) that would hide the
bug for good. Which op raised is found by watching the plain call's torch
functions; whether the empty dim is a batch dim of that op is asked of the op
itself: called alone with the dim at 2 and at 3, a batch dim carries over
into its result, where a dim the op reduces does not (``x.max(dim=0)`` of an
empty ``x`` rightly raises: no maximum of nothing).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils._pytree import tree_leaves, tree_map

__all__ = ["RaisingCall", "raising_call", "refuses_empty_batch"]

SIZES = (2, 3)  # the sizes an empty dim is given, to see it carried into the result


@dataclass(frozen=True)
class RaisingCall:
    """The innermost torch function whose exception left a call, with its arguments."""

    func: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    @property
    def name(self) -> str:
        """As a user writes it (``torch.fft.rfft``, ``torch.Tensor.div_``)."""
        return resolve_name(self.func) or getattr(self.func, "__name__", repr(self.func))


class _Raising(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.found: RaisingCall | None = None

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            return func(*args, **kwargs)
        except Exception:
            if self.found is None:  # the innermost raises first
                self.found = RaisingCall(func, tuple(args), dict(kwargs))
            raise


def raising_call(call: Callable[[], Any]) -> tuple[BaseException | None, RaisingCall | None]:
    """What ``call`` raised, if anything, and the torch function it was raised in."""
    watch = _Raising()
    try:
        with watch:
            call()
    except Exception as e:  # noqa: BLE001 - the caller's function: anything it raises
        return e, watch.found
    return None, None


def refuses_empty_batch(raising: RaisingCall) -> str | None:
    """Why ``raising`` is torch's bug: its op, written in C++, raises at an
    input whose every empty dim is a batch dim of the op, one it carries into
    its result: called alone with the empty dims at 2, and each in turn at 3,
    a dim of the result follows it. None where it is no such case (no empty
    dim, Python code of torch's that checks its input on purpose, a dim the
    op reduces or transforms, an op that raises at the grown input too)."""
    if not isinstance(raising.func, _COMPILED):
        return None
    tensors = [t for t in tree_leaves((raising.args, raising.kwargs)) if isinstance(t, torch.Tensor)]
    empty = [(i, d) for i, t in enumerate(tensors) if 0 in t.shape for d, n in enumerate(t.shape) if n == 0]
    if not empty:
        return None
    base = _shape_at(raising, {})
    if base is None:
        return None
    for dim in empty:
        grown = _shape_at(raising, {dim: SIZES[1]})
        if grown is None or len(grown) != len(base):
            return None
        if not any(a == SIZES[0] and b == SIZES[1] for a, b in zip(base, grown)):
            return None  # a dim the op reduces or transforms: an empty one may rightly be refused
        if not _leading(raising, tensors, dim, base):
            return None  # after a dim the op does not carry: a convolution's height, not its batch
    said = ", ".join(f"{t.dtype}{list(t.shape)}" for t in tensors if 0 in t.shape)
    return (
        f"torch's {raising.name} raises at an empty batch ({said}), where with the empty dims at "
        f"{SIZES[0]} it returns {list(base)}, each dim carried into its result: torch's ops take "
        f"empty batches, so the input is valid and the error is torch's"
    )


_COMPILED = (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType)


def _leading(raising: RaisingCall, tensors: list[torch.Tensor], dim: tuple[int, int], base: tuple[int, ...]) -> bool:
    """Whether every dim before ``dim`` in its tensor is carried too: batch
    dims lead. A convolution carries its input's height where the kernel's
    is 1, but the channels before it are not carried, and its input check
    rightly refuses a height smaller than the kernel's."""
    tensor, d = dim
    for p, n in enumerate(tensors[tensor].shape[:d]):
        if n == 0:
            continue  # an empty dim, asked on its own
        moved = _shape_at(raising, {(tensor, p): n + 1})
        if moved is None or len(moved) != len(base):
            return False
        if sorted(b - a for a, b in zip(base, moved)) != [0] * (len(base) - 1) + [1]:
            return False
    return True


def _shape_at(raising: RaisingCall, sizes: dict[tuple[int, int], int]) -> tuple[int, ...] | None:
    """The shape of the op's first tensor result with each empty dim at
    SIZES[0], and any dim at ``sizes[(tensor, dim)]``; None where it raises there too."""
    count = iter(range(1 << 30))

    def grown(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        k = next(count)
        shape = [sizes.get((k, d), SIZES[0] if n == 0 else n) for d, n in enumerate(t.shape)]
        return t if shape == list(t.shape) else _filled(t, shape)

    args, kwargs = tree_map(grown, (raising.args, raising.kwargs))
    try:
        with torch.no_grad():
            out = raising.func(*args, **kwargs)
    except Exception:  # noqa: BLE001 - it refuses the grown input too: nothing to tell
        return None
    first = next((o for o in tree_leaves(out) if isinstance(o, torch.Tensor)), None)
    return None if first is None else tuple(first.shape)


def _filled(t: torch.Tensor, shape: list[int]) -> torch.Tensor:
    """A tensor like ``t`` at ``shape``: random values of a floating dtype, else zeros (ones for bool)."""
    generator = torch.Generator().manual_seed(0)
    if t.is_floating_point() or t.is_complex():
        return torch.randn(shape, dtype=t.dtype, generator=generator).to(t.device)
    if t.dtype == torch.bool:
        return torch.ones(shape, dtype=t.dtype, device=t.device)
    return torch.zeros(shape, dtype=t.dtype, device=t.device)
