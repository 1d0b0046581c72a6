"""The values of a case's tensors, and the probes its checks draw: a seed, not the elements.

``Values`` is an interval, a seed and a few special positions: cheap to draw,
cheap to store, deterministic to rebuild. ``Probe`` is the recipe of a
cotangent or tangent shaped like a tensor known only at run time. Every random
number comes from ``fuzzdiff.case.draws``, never from torch's generator, so the same
recipe gives the same bits under any torch version; the arrays are drawn in
NumPy and rounded to the tensor's dtype once.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from fuzzdiff.case import draws
from fuzzdiff.case.layout import CaseError, Layout
from fuzzdiff.case.structures import exp_limit, level_moved, shift, structured

__all__ = [
    "Values",
    "Probe",
    "SPECIALS",
    "FINITE_SPECIALS",
    "special_value",
    "probe_like",
    "numpy_tensor",
    "tensor_array",
]

SPECIALS = ("0", "-0", "inf", "-inf", "nan", "tiny", "-tiny", "subnormal", "-subnormal", "huge", "-huge")
FINITE_SPECIALS = tuple(s for s in SPECIALS if s not in ("inf", "-inf", "nan"))


@functools.lru_cache(maxsize=256)
def special_value(name: str, dtype: torch.dtype) -> float:
    """The float a special-value name stands for in ``dtype``.

    "huge" is large but squarable without overflow, so that it probes loss of
    range in a formula rather than plain overflow of the op itself.
    """
    info = torch.finfo(dtype.to_real() if dtype.is_complex else dtype)
    sign = -1.0 if name.startswith("-") else 1.0
    base = name.lstrip("-")
    magnitude = {
        "0": 0.0,
        "inf": math.inf,
        "nan": math.nan,
        "tiny": info.tiny,
        "subnormal": info.tiny / 8,
        # the largest power of two whose square is finite (log2(max) rounds up to maxexp)
        "huge": 2.0 ** ((math.frexp(info.max)[1] - 1) // 2),
    }.get(base)
    if magnitude is None:
        raise CaseError(f"unknown special value {name!r}; expected one of {SPECIALS}")
    return sign * magnitude


# NumPy's dtype for a torch dtype NumPy can cast to itself (bfloat16 it cannot).
_NUMPY = {
    torch.float64: np.float64,
    torch.float32: np.float32,
    torch.float16: np.float16,
    torch.complex128: np.complex128,
    torch.complex64: np.complex64,
    torch.int64: np.int64,
    torch.bool: np.bool_,
}


def numpy_tensor(x: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """``x`` as a CPU tensor of ``dtype``, its memory layout kept; float
    conversions round to nearest even, as IEEE casts do."""
    if not x.size:  # NumPy's strides of an empty array are not torch's
        return torch.empty(x.shape, dtype=dtype)
    to = _NUMPY.get(dtype)
    if to is None:
        return torch.from_numpy(x).to(dtype)
    return torch.from_numpy(x if x.dtype == to else x.astype(to))


def tensor_array(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor's values as NumPy (which has no bfloat16)."""
    return (t.to(torch.float64) if t.dtype == torch.bfloat16 else t).numpy()


@functools.lru_cache(maxsize=4096)
def _positions(shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> np.ndarray:
    """The storage positions of a view's elements, in its logical order."""
    at = np.full(shape, offset, dtype=np.int64)
    for d, (n, st) in enumerate(zip(shape, strides)):
        at += (np.arange(n, dtype=np.int64) * st).reshape((n,) + (1,) * (len(shape) - d - 1))
    out = at.reshape(-1)
    out.flags.writeable = False
    return out


@dataclass(frozen=True)
class Values:
    """The logical values of one tensor: an interval, a seed and sparse specials.

    ``grid`` snaps values to multiples of a step (readable repros; Hypothesis
    shrinks toward it). ``avoid`` lists points where the target is not smooth;
    values closer than ``margin`` are pushed away so finite differences never
    straddle a kink. ``distinct`` spreads values apart for ops where ties are
    kinks (max, sort). ``kind`` is "float", "int" (integers in [low, high]) or "bool".
    ``structure`` lists structured points to put the values at, ``(name, k)``
    each (fuzzdiff.case.structures): ties, exact zeros, identity or diagonal
    matrices, repeated singular values, large values. A nudge keeps them (it
    moves the values before the structure is applied), unless ``nudge_off``:
    then it moves the structured values themselves, off their structure, and
    each value that repeats along a ``constant`` dim on its own.
    """

    seed: int = 0
    low: float = -2.0
    high: float = 2.0
    grid: float | None = None
    specials: tuple[tuple[int, str], ...] = ()
    avoid: tuple[float, ...] = ()
    margin: float = 0.0
    distinct: bool = False
    kind: str = "float"
    nudge: float = 0.0
    nudge_seed: int = 0
    constant: tuple[int, ...] = ()
    structure: tuple[tuple[str, int], ...] = ()
    nudge_off: bool = False

    def sample(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """A fresh contiguous CPU tensor of ``shape``; the same bits on every
        call, under every torch."""
        return numpy_tensor(self._sample(tuple(shape), dtype), dtype)

    def filled(
        self, shape: tuple[int, ...], dtype: torch.dtype, layout: Layout, narrow: tuple[int, ...]
    ) -> torch.Tensor:
        """A storage of ``layout`` holding ``sample(shape, dtype)`` in its view
        (narrowed to one element along the stride-0 dims ``narrow``) and, around
        it, ``layout.storage_size`` more values in the sampling interval: the
        memory around a strided view, where a kernel that reads outside its view
        picks up plausible numbers. Plain draws from the words after the values'
        own (junk needs no grid, specials or repeats), filled in NumPy and
        rounded to ``dtype`` once (IEEE rounding is per element)."""
        logical = self._sample(shape, dtype)
        if narrow:
            logical = logical[tuple(slice(0, 1) if d in narrow else slice(None) for d in range(len(shape)))]
        if layout.storage_size > _CACHED_VALUES:
            storage = self._junk(shape, layout.storage_size)
        else:  # drawn once, like the values: the variants of an example ask for it again
            storage = _cached_junk(self, shape, layout.storage_size).copy()
        if logical.dtype != storage.dtype:  # complex values, real junk
            storage = storage.astype(logical.dtype)
        storage[_positions(logical.shape, layout.strides, layout.offset)] = logical.reshape(-1)
        return numpy_tensor(storage, dtype)

    def _junk(self, shape: tuple[int, ...], size: int) -> np.ndarray:
        z = draws.words(self.seed, size, draws.VALUES, 4 * math.prod(shape))
        if self.kind == "int":
            return draws.integers(z, int(self.low), int(self.high))
        if self.kind == "bool":
            return draws.bits(z)
        return draws.uniform(z, self.low, self.high)  # a complex junk value is real: in the interval all the same

    def junk(self, size: int, dtype: torch.dtype) -> torch.Tensor:
        """``size`` in-domain values from a stream of their own: the memory
        around a view whose values were not drawn here (a stack of samples)."""
        return replace(self, seed=self.seed ^ 0x2545F491, specials=(), constant=()).sample((size,), dtype)

    def _sample(self, shape: tuple[int, ...], dtype: torch.dtype) -> np.ndarray:
        """The values as a fresh array of ``shape`` (float64 or complex128 for
        a float kind, rounded to ``dtype`` by the caller). Small ones are drawn
        once: an example's variants (its layouts, its confirmations) ask for
        the same values again."""
        if math.prod(shape) > _CACHED_VALUES:
            return self._drawn(shape, dtype)
        return _cached_sample(self, shape, dtype).copy()

    def _drawn(self, shape: tuple[int, ...], dtype: torch.dtype) -> np.ndarray:
        """``_sample``, drawn. The values stream holds, per element count n,
        the real parts in words [0, 2n), the imaginary parts in [2n, 4n) and
        junk from 4n on."""
        n = math.prod(shape)
        kind = self.kind
        repeats = [d for d in self.constant if d < len(shape) and shape[d] > 1]
        # nudged off the repeats too: each repeated value moves on its own, after they are made
        untie = bool(self.nudge and self.nudge_off and repeats) and kind == "float"
        if kind == "float":
            out = self._reals(n, 0, nudged=not untie)
            if dtype.is_complex:
                real, out = out, np.empty(n, np.complex128)
                out.real, out.imag = real, self._reals(n, 2 * n, nudged=not untie)
            if self.structure:
                out = self._structured(out, shape, dtype, nudged=not untie)
            if self.specials and n:
                for pos, name in self.specials:  # exact in float64, and after rounding to dtype
                    out[pos % n] = special_value(name, dtype)
        elif kind == "int":
            out = draws.integers(draws.words(self.seed, n), int(self.low), int(self.high))
        else:  # bool
            out = draws.bits(draws.words(self.seed, n))
        out = out.reshape(shape)
        if repeats:
            for d in repeats:
                out = np.broadcast_to(out[(slice(None),) * d + (slice(0, 1),)], shape)
            out = np.ascontiguousarray(out)
        if untie:
            out = self._untied(out)
        return out

    def _untied(self, x: np.ndarray) -> np.ndarray:
        """Values ``x`` that repeat along ``constant`` dims, each moved on its
        own by the nudge (special positions keep their values)."""
        flat = x.reshape(-1)
        n = flat.size
        moved = flat + self._step(n, self.nudge, self.nudge_seed, at=flat)
        if np.iscomplexobj(flat):
            moved = moved + 1j * self._step(n, self.nudge, self.nudge_seed, 2 * n, at=flat)
        else:
            moved = self._pushed(moved)
        for pos, _ in self.specials:
            moved[pos % n] = flat[pos % n]
        return moved.reshape(x.shape)

    def _reals(self, n: int, start: int, nudged: bool = True) -> np.ndarray:
        """``n`` float64 values from words ``start`` on (2n at most) of the
        values stream, nudged from the same words of the nudges stream
        (unless ``nudged`` is False: the caller moves them later)."""
        lo, hi = self.low, self.high
        if self.distinct and n > 1:
            # A shuffled, jittered ladder: rung r at r + [0.3, 0.7) of n rungs,
            # so every gap is at least 0.6 of a rung.
            z = draws.words(self.seed, 2 * n, draws.VALUES, start)
            x = draws.permutation(z[:n]) + draws.uniform(z[n:], 0.3, 0.7)
            x *= (hi - lo) / n
            x += lo
        else:
            z = draws.words(self.seed, n, draws.VALUES, start)
            grid = self.grid
            first, last = (math.ceil(lo / grid), math.floor(hi / grid)) if grid else (1, 0)
            if grid and first <= last:  # grid points in [lo, hi], uniformly
                x = np.multiply(draws.integers(z, first, last), grid, dtype=np.float64)
            else:  # no grid, or no grid point inside the interval
                x = draws.uniform(z, lo, hi)
        if nudged and self.nudge and not (self.nudge_off and self.structure):
            x += self._step(n, self.nudge, self.nudge_seed, start)
        return self._pushed(x)

    def _structured(
        self, out: np.ndarray, shape: tuple[int, ...], dtype: torch.dtype, nudged: bool = True
    ) -> np.ndarray:
        """Flat values ``out`` at their structured point (then nudged off it
        for ``nudge_off``, unless ``nudged`` is False), flat again."""
        limit = exp_limit(str(dtype))
        x = structured(out.reshape(shape), self.structure, self.low, self.high, limit).reshape(-1)
        if nudged and self.nudge and not self.nudge_off and any(name == "ties" for name, _ in self.structure):
            # snapping to the tie levels undid the nudge: the levels move instead
            x = level_moved(x, x + self._step(x.size, self.nudge, self.nudge_seed ^ _TIE_LEVELS, at=x))
        if nudged and self.nudge and self.nudge_off:
            n = x.size
            x = x + self._step(n, self.nudge, self.nudge_seed, at=x)
            if np.iscomplexobj(x):
                x = x + 1j * self._step(n, self.nudge, self.nudge_seed, 2 * n, at=x)
        return np.ascontiguousarray(x)

    def _step(self, n: int, amount: float, seed: int, start: int = 0, at: np.ndarray | None = None) -> np.ndarray:
        """A nudge of ``n`` values: at most ``amount`` of the span away, even
        for a one-point interval; a sampling interval keeps more than that
        away from its domain's edges. Values ``at`` past the span (a "large"
        or "overflow" structure scaled them) move by ``amount`` of their own
        magnitude: a float32-rounding nudge of 112.8 by a part of the span
        [-2, 2] rounded back to 112.8, and a neighbour was the point itself."""
        # tanh, not a clip: a clip puts a third of the steps on exactly +-1, so two
        # arguments drawn alike (x1 == x2 at a ranking loss's kink) kept ties apart
        step = np.tanh(draws.normal(draws.words(seed, 2 * n, draws.NUDGES, start)))
        span = max(self.high - self.low, 1.0, shift(self.structure) if self.structure else 0.0)
        step *= amount * span
        if at is not None:
            step *= np.maximum(1.0, np.abs(at).reshape(-1) / span)
        return step

    def _pushed(self, x: np.ndarray) -> np.ndarray:
        """``x`` with values closer than ``margin`` to a kink in ``avoid`` moved
        to the nearer side, or to the other one when that side leaves [low, high]."""
        lo, hi, margin = self.low, self.high, self.margin
        for k in self.avoid:
            near = np.abs(x - k) < margin
            up, down = min(k + margin, hi), max(k - margin, lo)
            side = np.where(x >= k, up if k + margin <= hi else down, down if k - margin >= lo else up)
            x = np.where(near, side, x)
        return x


_CACHED_VALUES = 1024  # elements
_TIE_LEVELS = 0x71E5  # the nudge stream of tied levels (Values._structured), apart from the values' own


@functools.lru_cache(maxsize=4096)
def _cached_sample(values: Values, shape: tuple[int, ...], dtype: torch.dtype) -> np.ndarray:
    return values._drawn(shape, dtype)


@functools.lru_cache(maxsize=4096)
def _cached_junk(values: Values, shape: tuple[int, ...], size: int) -> np.ndarray:
    return values._junk(shape, size)


@dataclass(frozen=True)
class Probe:
    """A recipe for a cotangent or tangent shaped like a tensor known only at run time.

    Random and non-unit; sometimes expanded (stride 0 along a dim the seed picks),
    sometimes noncontiguous (transposed), sometimes with a fraction of zeros.
    """

    seed: int = 0
    layout: str = "contiguous"  # "contiguous" | "expanded" | "transposed"
    zeros: float = 0.0

    def like(self, t: torch.Tensor) -> torch.Tensor:
        return probe_like(self.seed, self.layout, self.zeros, t)


def probe_like(seed: int, layout: str, zeros: float, t: torch.Tensor) -> torch.Tensor:
    """``Probe(seed, layout, zeros).like(t)``, without building the Probe: the
    derivative checks make two or three probes per example from plain params."""
    shape = tuple(t.shape)
    dims = [d for d, n in enumerate(shape) if n > 1] if layout == "expanded" else ()
    if len(dims) >= 2:  # expanded, and still varies along another dim
        d = dims[seed % len(dims)]
        small = list(shape)
        small[d] = 1
        out = numpy_tensor(_probe_values(tuple(small), seed, t.dtype, zeros), t.dtype).expand(shape)
    else:
        x = _probe_values(shape, seed, t.dtype, zeros)
        transposed = layout == "transposed" and len(shape) >= 2
        if transposed and x.size:  # in NumPy: the cast keeps the layout
            x = np.ascontiguousarray(x.swapaxes(-1, -2)).swapaxes(-1, -2)
        out = numpy_tensor(x, t.dtype)
        if transposed and not x.size:
            out = out.mT.contiguous().mT
    return out if t.is_cpu else out.to(t.device)


# Probes of at most this many elements are drawn once per (shape, seed): the
# variants of one example (its layouts, structures and dtypes) ask for the same
# probes again, three times in four in bench/throughput.py's grad mix (and its
# values again three times in five).
_CACHED_PROBE = 1024


def _probe_values(shape: tuple[int, ...], seed: int, dtype: torch.dtype, zeros: float) -> np.ndarray:
    """Normal-like values, mean 0.25 and deviation 1.5 (random and non-unit),
    a fraction ``zeros`` of them zeroed, imaginary parts standard normal-like:
    from words [0, 2n), [2n, 3n) and [3n, 5n) of the probes stream. A fresh
    array: the caller's tensor may share its memory, and a target may write
    into its cotangent."""
    if math.prod(shape) > _CACHED_PROBE:
        return _drawn_probe_values(shape, seed, dtype.is_complex, zeros)
    return _cached_probe_values(shape, seed, dtype.is_complex, zeros).copy()


@functools.lru_cache(maxsize=4096)
def _cached_probe_values(shape: tuple[int, ...], seed: int, cplx: bool, zeros: float) -> np.ndarray:
    return _drawn_probe_values(shape, seed, cplx, zeros)


def _drawn_probe_values(shape: tuple[int, ...], seed: int, cplx: bool, zeros: float) -> np.ndarray:
    n = math.prod(shape)
    z = draws.words(seed, (5 if cplx else 3 if zeros else 2) * n, draws.PROBES)
    v = draws.normal(z[: 2 * n], 0.25, 1.5)
    if zeros:
        v *= draws.uniform(z[2 * n : 3 * n]) >= zeros
    if cplx:
        real, v = v, np.empty(n, np.complex128)
        v.real, v.imag = real, draws.normal(z[3 * n : 5 * n])
    return v.reshape(shape)
