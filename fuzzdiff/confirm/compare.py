"""Comparing lists of tensors, dtype-aware, with a readable error summary.

Used by the checks whose two sides are whole tensors (layout, alias, dtype)
rather than two numbers of a directional identity. Also what a dtype cannot
hold: a float64 value beyond its largest finite one (``beyond_range``), which
a low-precision result cannot be judged on (fuzzdiff.confirm.low_precision).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fuzzdiff.confirm.tolerance import Tolerance
from fuzzdiff.paths.result import Result

__all__ = ["Discrepancy", "worst_discrepancy", "max_abs", "mismatch", "beyond_range", "holds", "out_of_range"]


@dataclass(frozen=True)
class Discrepancy:
    """The worst mismatch between two lists of tensors, relative to the second."""

    what: str  # e.g. "output 0" or "grad of argument 1"
    abs_error: float
    scale: float  # max |reference| of that tensor
    index: tuple[int, ...] = ()

    def within(self, tol: Tolerance, slack: float = 0.0) -> bool:
        return self.abs_error <= tol.atol + tol.rtol * self.scale + slack

    def summary(self) -> dict:
        return {"where": self.what, "abs_error": self.abs_error, "scale": self.scale, "index": list(self.index)}

    def __str__(self) -> str:
        at = f" at {list(self.index)}" if self.index else ""
        return f"{self.what}{at}: abs error {self.abs_error:.3g} (reference scale {self.scale:.3g})"


def max_abs(t: torch.Tensor) -> float:
    t = t.detach()
    if not (t.is_floating_point() or t.is_complex()):
        t = t.to(torch.float64)  # a mask or an index compared as numbers: abs() has no bool kernel
    finite = t.abs()
    finite = finite[torch.isfinite(finite)]
    return float(finite.max()) if finite.numel() else 0.0


def mismatch(a: torch.Tensor, b: torch.Tensor) -> tuple[float, tuple[int, ...]]:
    """Largest |a - b|; a NaN or infinity in one but not the other is infinite."""
    a = a.detach().to(torch.complex128 if a.is_complex() else torch.float64).cpu()
    b = b.detach().to(a.dtype).cpu()
    if a.shape != b.shape:
        return math.inf, ()
    if a.numel() == 0:
        return 0.0, ()
    same = (a == b) | (torch.isnan(a) & torch.isnan(b))
    diff = torch.where(same, torch.zeros((), dtype=torch.float64), (a - b).abs())
    diff = torch.nan_to_num(diff, nan=math.inf)
    flat = int(diff.argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape)) if a.dim() else ()
    return float(diff.reshape(-1)[flat]), index


def worst_discrepancy(
    names: Sequence[str],
    got: Sequence[torch.Tensor],
    expected: Sequence[torch.Tensor],
    tol: Tolerance,
    slack: Sequence[float] | None = None,
    scale_floor: float = 0.0,
    scales: Sequence[float] | None = None,
) -> Discrepancy | None:
    """The first tensor pair outside tolerance (None if all agree).

    Each pair is judged on the scale of its own reference (a small tensor's
    error is not hidden by a large one elsewhere): its largest |value|, or
    ``scales[k]`` where that is larger. ``slack[k]`` widens pair k's allowance
    (the reference's own uncertainty). ``scale_floor`` raises every scale
    alike, for results that are zero only by cancellation of terms of that size.
    """
    if len(got) != len(expected):
        return Discrepancy(f"{len(got)} tensors vs {len(expected)}", math.inf, 0.0)
    for k, (name, a, b) in enumerate(zip(names, got, expected)):
        err, index = mismatch(a, b)
        d = Discrepancy(name, err, max(max_abs(b), scale_floor, scales[k] if scales else 0.0), index)
        if not d.within(tol, slack[k] if slack else 0.0):
            return d
    return None


def result_discrepancy(got: Result, want: Result, tol: Tolerance) -> Discrepancy | None:
    """The first of two paths' results outside tolerance, shapes first: a wrong
    batch dim or grad_sample shape can be garbage that must not be allocated
    in float64, let alone compared element by element."""
    for name, a, b in zip(want.names, got.tensors, want.tensors):
        if a.shape != b.shape:
            return Discrepancy(f"{name}: shape {list(a.shape)} vs {list(b.shape)}", math.inf, 0.0)
    return worst_discrepancy(want.names, got.tensors, want.tensors, tol)


def beyond_range(t: torch.Tensor, dtype: torch.dtype, scaled: float = 1.0) -> torch.Tensor:
    """Where the float64 values ``t`` are finite and beyond ``dtype``'s largest
    finite value (for a complex value, either part): values ``dtype`` cannot
    hold, so that a result computed in it overflows there. ``t`` may hold
    the values times ``scaled``, a power of two below 1: so is float64's own
    range seen past its end."""
    parts = torch.view_as_real(t.detach()) if t.is_complex() else t.detach()
    size = parts.abs()
    beyond = torch.isfinite(size) & (size > torch.finfo(dtype).max * scaled)
    return beyond.any(-1) if t.is_complex() else beyond


def holds(dtype: torch.dtype, x: float) -> bool:
    """Whether the number ``x`` is finite and within ``dtype``'s range."""
    return math.isfinite(x) and abs(x) <= torch.finfo(dtype).max


def out_of_range(
    names: Sequence[str], tensors: Sequence[torch.Tensor], dtype: torch.dtype, scaled: float = 1.0
) -> str | None:
    """The first value of the float64 ``tensors`` (times ``scaled``, as in
    ``beyond_range``) that ``dtype`` cannot hold, in words ("output 0 at
    [0, 0]: float64 value 1.5e+111 is outside float32's finite range"); None
    where every value fits."""
    for name, t in zip(names, tensors):
        if not (t.is_floating_point() or t.is_complex()) or not t.numel():
            continue
        beyond = beyond_range(t, dtype, scaled).cpu()
        if bool(beyond.any()):
            flat = int(beyond.reshape(-1).to(torch.uint8).argmax())
            index = [int(i) for i in torch.unravel_index(torch.tensor(flat), t.shape)] if t.dim() else []
            value = t.detach().cpu().reshape(-1)[flat]
            shown = (
                _shown(float(value.abs()), scaled) + " (in modulus)" if t.is_complex() else _shown(float(value), scaled)
            )
            at = f" at {index}" if index else ""
            return f"{name}{at}: float64 value {shown} is outside {str(dtype).removeprefix('torch.')}'s finite range"
    return None


def _shown(x: float, scaled: float) -> str:
    """``x / scaled`` to three digits, also where it is beyond float64's range."""
    if math.isfinite(x / scaled):
        return f"{x / scaled:.3g}"
    tens = math.log10(abs(x)) - math.log10(scaled)
    power = math.floor(tens)
    return f"{'-' if x < 0 else ''}{10 ** (tens - power):.3g}e+{power}"
