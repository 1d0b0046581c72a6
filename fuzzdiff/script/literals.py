"""Python literals that rebuild values bit for bit: scalars, kwargs, tensors.

A standalone script carries its data as source text, so every number must
parse back to the very same bits in its dtype: the shortest decimal that does
(checked, not assumed), ``float.fromhex`` strings for large storages.
"""

from __future__ import annotations

import math
import textwrap
from typing import Any

import torch

from fuzzdiff.case.layout import Layout
from fuzzdiff.errors import FuzzdiffError

__all__ = [
    "ScriptError",
    "value_literal",
    "tensor_literal",
    "storage_literal",
    "dtype_name",
    "INLINE_LIMIT",
    "WIDTH",
    "ON_DEVICE",
]

INLINE_LIMIT = 4096  # elements; more are written compactly as float.hex strings
WIDTH = 88
ON_DEVICE = ".to(DEVICE)"  # a CPU-built storage moved to the device a script runs on


class ScriptError(FuzzdiffError, ValueError):
    """A case or target that cannot be written as a standalone torch-only script."""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype)  # "torch.float32"


def _float_text(v: float, dtype: torch.dtype) -> str:
    """The shortest decimal that converts back to ``v`` in ``dtype``."""
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if dtype == torch.float64:
        text = repr(v)
    else:
        for digits in range(1, 18):
            text = f"{v:.{digits}g}"
            back = torch.tensor([float(text)], dtype=dtype).item()
            if back == v and math.copysign(1.0, back) == math.copysign(1.0, v):
                break
        else:  # pragma: no cover - 17 significant digits always round-trip a double
            text = repr(v)
    if not any(c in text for c in ".eEn"):
        text += ".0"  # "-0" would be the integer 0 and lose its sign
    return text


def value_literal(x: Any) -> str:
    """A literal for JSON-like data (kwargs): exact floats, lists as lists."""
    if isinstance(x, bool) or x is None or isinstance(x, (int, str)):
        return repr(x)
    if isinstance(x, float):
        if math.isnan(x):
            return "math.nan"
        if math.isinf(x):
            return "math.inf" if x > 0 else "-math.inf"
        return repr(x)
    if isinstance(x, torch.dtype):
        return dtype_name(x)
    if isinstance(x, (list, tuple)):
        inner = ", ".join(value_literal(v) for v in x)
        if isinstance(x, tuple):
            return f"({inner},)" if len(x) == 1 else f"({inner})"
        return f"[{inner}]"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{value_literal(k)}: {value_literal(v)}" for k, v in x.items()) + "}"
    raise ScriptError(f"cannot write {type(x).__name__} {x!r} as a literal")


def _items(flat: torch.Tensor) -> list[str]:
    dtype = flat.dtype
    if dtype == torch.bool:
        return [repr(bool(v)) for v in flat.tolist()]
    if dtype.is_complex:
        real = dtype.to_real()
        return [f"complex({_float_text(z.real, real)}, {_float_text(z.imag, real)})" for z in flat.tolist()]
    if dtype.is_floating_point:
        return [_float_text(v, dtype) for v in flat.tolist()]
    return [repr(int(v)) for v in flat.tolist()]


def _wrap(items: list[str], indent: str) -> str:
    return textwrap.fill(
        ", ".join(items),
        width=WIDTH,
        initial_indent=indent,
        subsequent_indent=indent,
        break_on_hyphens=False,
        break_long_words=False,
    )


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit, except that a NaN's sign and payload are not kept (any NaN is NaN)."""
    if a.dtype.is_complex:
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    if not a.dtype.is_floating_point:
        return torch.equal(a, b)
    nan = a.isnan()
    if not torch.equal(nan, b.isnan()):
        return False
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a[~nan].contiguous().view(width), b[~nan].contiguous().view(width))


def storage_literal(flat: torch.Tensor, indent: str = "    ") -> str:
    """``torch.tensor([...], dtype=...)`` holding exactly the 1-D tensor ``flat``."""
    flat = flat.detach().cpu().reshape(-1)
    dtype = dtype_name(flat.dtype)
    if flat.numel() == 0:
        return f"torch.tensor([], dtype={dtype})"
    if flat.numel() > INLINE_LIMIT and (flat.dtype.is_floating_point or flat.dtype.is_complex):
        wide = torch.view_as_real(flat) if flat.dtype.is_complex else flat
        hexes = textwrap.fill(" ".join(float.hex(v) for v in wide.double().tolist()), width=WIDTH)
        text = f'torch.tensor([float.fromhex(h) for h in """\n{hexes}\n""".split()], dtype=torch.float64)'
        if flat.dtype.is_complex:
            text = f"torch.view_as_complex({text}.reshape(-1, 2))"
        text = f"{text}.to({dtype})"
    else:
        items = _items(flat)
        inline = ", ".join(items)
        text = (
            f"torch.tensor([{inline}], dtype={dtype})"
            if len(inline) <= 48
            else f"torch.tensor([\n{_wrap(items, indent + '    ')},\n{indent}], dtype={dtype})"
        )
    # The text itself, parsed as the script will parse it (our own text: eval is safe).
    built = eval(text, {"torch": torch, "nan": math.nan, "inf": math.inf})  # noqa: S307
    if not _same_bits(built, flat):  # pragma: no cover - a bug in the formatting above
        raise ScriptError(f"the literal for a {flat.dtype} tensor does not round-trip")
    return text


def tensor_literal(t: torch.Tensor, indent: str = "    ", on_device: bool = False) -> str:
    """A tensor with ``t``'s values, shape, strides and storage offset exactly;
    ``on_device``: on the script's ``DEVICE``, its storage moved there before it
    is viewed, so that the strides and the offset hold there too."""
    t = t.detach().cpu()
    shape = tuple(t.shape)
    to = ON_DEVICE if on_device else ""
    # is_contiguous() ignores the strides of size-1 dims; reshape() would not keep them
    if (
        t.stride() == Layout.contiguous(shape).strides
        and t.storage_offset() == 0
        and t.untyped_storage().nbytes() == t.numel() * t.element_size()
    ):
        return f"{storage_literal(t.reshape(-1), indent)}{to}.reshape({shape!r})"
    storage = torch.tensor([], dtype=t.dtype).set_(t.untyped_storage())
    return f"{storage_literal(storage, indent)}{to}.as_strided({shape!r}, {tuple(t.stride())!r}, {t.storage_offset()})"
