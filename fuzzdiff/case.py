"""A Case: one fuzzed example, as plain data.

A case holds everything needed to rebuild the exact tensors of one example —
shapes, strides, storage offsets, aliasing, values, dtype — and nothing else, so
it can be written to JSON, shrunk by Hypothesis and replayed bit for bit later
without Hypothesis. Values are a seed plus a few special positions rather than
the elements themselves: cheap to draw, cheap to store, deterministic to rebuild.
Every random number (values, memory around views, probes, nudges) comes from
``fuzzdiff.draws``, never from torch's generator, so a case is a pure function
of its JSON under any torch version.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from typing import Any, TypeVar

import numpy as np
import torch

from fuzzdiff import draws
from fuzzdiff.structures import STRUCTURES, exp_limit, level_moved, restored, shift, structured

__all__ = [
    "Values",
    "Layout",
    "Alias",
    "Arg",
    "Probe",
    "Case",
    "Inputs",
    "CaseError",
    "DTYPES",
    "special_value",
    "SPECIALS",
    "STRUCTURES",
    "probe_like",
    "case_from_json",
    "decode_floats",
]

DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.complex128,
        torch.complex64,
        torch.int64,
        torch.bool,
    )
}

SPECIALS = ("0", "-0", "inf", "-inf", "nan", "tiny", "-tiny", "subnormal", "-subnormal", "huge", "-huge")
FINITE_SPECIALS = tuple(s for s in SPECIALS if s not in ("inf", "-inf", "nan"))


class CaseError(ValueError):
    """A case (or the JSON it came from) that cannot describe real tensors."""


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


def _tensor(x: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """``x`` as a CPU tensor of ``dtype``, its memory layout kept; float
    conversions round to nearest even, as IEEE casts do."""
    if not x.size:  # NumPy's strides of an empty array are not torch's
        return torch.empty(x.shape, dtype=dtype)
    to = _NUMPY.get(dtype)
    if to is None:
        return torch.from_numpy(x).to(dtype)
    return torch.from_numpy(x if x.dtype == to else x.astype(to))


def _array(t: torch.Tensor) -> np.ndarray:
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


_T = TypeVar("_T")


def _evolve(obj: _T, **changes: Any) -> _T:
    """``dataclasses.replace`` for the frozen, validation-free dataclasses here,
    without re-running ``__init__`` (several times faster). Everything in the
    instance's ``__dict__`` is carried over, cached properties included: only
    for changes that leave those valid."""
    new = object.__new__(type(obj))
    d = new.__dict__
    d.update(obj.__dict__)
    d.update(changes)
    return new


@dataclass(frozen=True)
class Values:
    """The logical values of one tensor: an interval, a seed and sparse specials.

    ``grid`` snaps values to multiples of a step (readable repros; Hypothesis
    shrinks toward it). ``avoid`` lists points where the target is not smooth;
    values closer than ``margin`` are pushed away so finite differences never
    straddle a kink. ``distinct`` spreads values apart for ops where ties are
    kinks (max, sort). ``kind`` is "float", "int" (integers in [low, high]) or "bool".
    ``structure`` lists structured points to put the values at, ``(name, k)``
    each (fuzzdiff.structures): ties, exact zeros, identity or diagonal
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
        return _tensor(self._sample(tuple(shape), dtype), dtype)

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
        return _tensor(storage, dtype)

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
        moved = flat + self._step(n, self.nudge, self.nudge_seed)
        if np.iscomplexobj(flat):
            moved = moved + 1j * self._step(n, self.nudge, self.nudge_seed, 2 * n)
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
            x = level_moved(x, x + self._step(x.size, self.nudge, self.nudge_seed ^ _TIE_LEVELS))
        if nudged and self.nudge and self.nudge_off:
            n = x.size
            x = x + self._step(n, self.nudge, self.nudge_seed)
            if np.iscomplexobj(x):
                x = x + 1j * self._step(n, self.nudge, self.nudge_seed, 2 * n)
        return np.ascontiguousarray(x)

    def _step(self, n: int, amount: float, seed: int, start: int = 0) -> np.ndarray:
        """A nudge of ``n`` values: at most ``amount`` of the span away, even
        for a one-point interval; a sampling interval keeps more than that
        away from its domain's edges."""
        step = draws.normal(draws.words(seed, 2 * n, draws.NUDGES, start))
        np.clip(step, -1.0, 1.0, out=step)
        step *= amount * max(self.high - self.low, 1.0, shift(self.structure) if self.structure else 0.0)
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
class Layout:
    """Where a tensor's elements live: ``storage.as_strided(shape, strides, offset)``.

    The same recipe a bug report would use, so replay and standalone scripts
    rebuild exactly the memory layout that was fuzzed.
    """

    storage_size: int
    strides: tuple[int, ...]
    offset: int = 0

    @staticmethod
    def contiguous(shape: Sequence[int]) -> Layout:
        strides, acc = [], 1
        for s in reversed(shape):
            strides.append(acc)
            acc *= max(s, 1)
        return Layout(math.prod(shape), tuple(reversed(strides)), 0)

    def check(self, shape: Sequence[int], where: str = "layout") -> None:
        if len(self.strides) != len(shape):
            raise CaseError(f"{where}: {len(self.strides)} strides for a rank-{len(shape)} shape")
        if self.offset < 0 or any(s < 0 for s in self.strides):
            raise CaseError(f"{where}: negative offset or stride")
        if math.prod(shape) == 0:
            return
        last = self.offset + sum((n - 1) * s for n, s in zip(shape, self.strides))
        if last >= self.storage_size:
            raise CaseError(f"{where}: element {last} lies past storage_size {self.storage_size}")

    def is_contiguous(self, shape: Sequence[int]) -> bool:
        c = Layout.contiguous(shape)
        return self.offset == 0 and all(n <= 1 or s == cs for n, s, cs in zip(shape, self.strides, c.strides))

    def writable_view(self, storage: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        """The view with stride-0 dims narrowed to one element, so a copy never overlaps."""
        sizes = [min(n, 1) if st == 0 else n for n, st in zip(shape, self.strides)]
        return storage.as_strided(sizes, self.strides, self.offset)


@dataclass(frozen=True)
class Alias:
    """This argument shares memory with argument ``of``.

    "same": it *is* that tensor object. "view": it is another view, by its own
    layout, of that argument's storage (overlapping or disjoint).
    """

    of: int
    kind: str  # "same" | "view"


@dataclass(frozen=True)
class Arg:
    """One positional tensor argument.

    ``grad`` says what derivatives are taken with respect to: "leaf" (the tensor
    itself), "view" (its storage is the leaf and the argument a non-leaf view of
    it) or "none" (not differentiated: indices, masks, fixed targets).
    """

    shape: tuple[int, ...]
    values: Values = field(default_factory=Values)
    layout: Layout | None = None
    alias: Alias | None = None
    grad: str = "leaf"
    dtype: str | None = None  # overrides the case dtype (indices, masks)

    @property
    def strided(self) -> Layout:
        return self.layout or Layout.contiguous(self.shape)


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
        out = _tensor(_probe_values(tuple(small), seed, t.dtype, zeros), t.dtype).expand(shape)
    else:
        x = _probe_values(shape, seed, t.dtype, zeros)
        transposed = layout == "transposed" and len(shape) >= 2
        if transposed and x.size:  # in NumPy: the cast keeps the layout
            x = np.ascontiguousarray(x.swapaxes(-1, -2)).swapaxes(-1, -2)
        out = _tensor(x, t.dtype)
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


@dataclass
class Inputs:
    """Materialized tensors of a case.

    ``rebuild`` maps differentiable leaves to the target's arguments, so that a
    derivative check can run ``fn(*rebuild(leaves))`` at perturbed or dual leaves
    and still reproduce the fuzzed views and aliasing. ``sources[i]`` says where
    argument i comes from: ``(leaf index, None)`` when it is that leaf,
    ``(leaf index, layout)`` when it is a view of a storage leaf, or None.
    """

    args: list[torch.Tensor]
    leaves: list[torch.Tensor]
    rebuild: Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]
    sources: list[tuple[int, Layout | None] | None]


# How Case fills one storage: (i, shape, layout, dtype, how, sizes, narrow, bad); see Case._fills.
_Fill = tuple[int, tuple[int, ...], Layout, torch.dtype, str, tuple[int, ...], tuple[int, ...], str | None]


@dataclass(frozen=True)
class Case:
    target: str
    args: tuple[Arg, ...]
    dtype: str = "float64"
    device: str = "cpu"
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    # Argument index -> its filled storage, pinned exactly (a corpus record's
    # stored values). Anything that redraws the values or moves the layouts
    # drops it; nudged() moves the pinned values themselves.
    data: Mapping[int, torch.Tensor] = field(default_factory=dict, compare=False, repr=False)
    # Arguments the target gets as contiguous copies of themselves (``copied``).
    copies: tuple[int, ...] = ()

    @property
    def torch_dtype(self) -> torch.dtype:
        try:
            return DTYPES[self.dtype]
        except KeyError:
            raise CaseError(f"unknown dtype {self.dtype!r}; expected one of {sorted(DTYPES)}") from None

    def arg_dtype(self, i: int) -> torch.dtype:
        name = self.args[i].dtype
        return DTYPES[name] if name else self.torch_dtype

    def with_dtype(self, dtype: torch.dtype | str) -> Case:
        return replace(self, dtype=str(dtype).removeprefix("torch."), data={})

    @property
    def structured(self) -> bool:
        """Some argument's values sit at a structured point (fuzzdiff.structures)."""
        return any(a.values.structure for a in self.args)

    @property
    def repeated(self) -> bool:
        """Some argument is an earlier one passed again (alias "same"): a tie
        between arguments that no move of the values breaks (``dist(x, x)``)."""
        return any(a.alias is not None and a.alias.kind == "same" for a in self.args)

    @property
    def stride0(self) -> bool:
        """Some argument that neighbours move is laid out with stride 0 along a
        dim of size > 1, in a storage of its own: its layout repeats its
        values, and may have made the point singular (repeated rows make a
        rank-deficient matrix) where the values alone would not."""
        return bool(self._stride0_args())

    def _stride0_args(self) -> list[int]:
        shared = {self.owner(i) for i, a in enumerate(self.args) if a.alias is not None}
        return [
            i
            for i, a in enumerate(self.args)
            if a.alias is None
            and i not in shared
            and a.grad != "none"
            and a.values.kind == "float"
            and a.layout is not None
            and any(st == 0 and n > 1 for n, st in zip(a.shape, a.layout.strides))
        ]

    def copied(self) -> Case:
        """The case with each ``stride0`` argument passed to the target as a
        contiguous copy of itself: the same leaves, values and directions, each
        repeated value in memory of its own. A mismatch that vanishes here is
        the stride-0 layout's own."""
        return replace(self, copies=tuple(self._stride0_args()))

    def spread(self) -> Case:
        """The same values with each ``stride0`` argument laid out contiguously:
        every repeated value stored on its own (they still repeat), so that a
        neighbour (``nudged(..., keep_structure=False)``) can move each apart.
        Pinned values are copied out of the old layout."""
        args, data = list(self.args), dict(self.data)
        for i in self._stride0_args():
            a = args[i]
            args[i] = replace(a, layout=None)
            if i in data:
                lay = a.strided
                data[i] = data[i].as_strided(a.shape, lay.strides, lay.offset).contiguous().reshape(-1)
        return replace(self, args=tuple(args), data=data)

    def untied(self) -> Case:
        """Each argument that repeats a leaf argument (alias "same") made a leaf
        of its own with the same values: the tie is kept, the sharing is not."""
        args, data = list(self.args), dict(self.data)
        for i, a in enumerate(self.args):
            if a.alias is None or a.alias.kind != "same" or args[a.alias.of].alias is not None:
                continue
            args[i] = args[a.alias.of]
            if a.alias.of in data:
                data[i] = data[a.alias.of].clone()
        return replace(self, args=tuple(args), data=data)

    def nudged(self, amount: float, seed: int, keep_structure: bool = True) -> Case:
        """A neighbouring point: every floating value of a differentiable
        argument moved by at most ``amount`` of its range; structured values
        stay structured (the ties still tie, the zeros are still zeros), and
        so do values that repeat along a ``Values.constant`` dim, unless
        ``keep_structure`` is False: then each of those moves on its own
        (where the layout stores each: ``spread``), and a repeated argument
        (``repeated``) becomes its own leaf too, and stays where it is while
        the argument it repeats moves (two moves could coincide: a step is
        clipped to the amount).

        Pinned values (a record's) are moved themselves and stay pinned, so
        the neighbour is near the values the record holds, not near a redraw."""
        case, still = self, set()
        if not keep_structure and self.repeated:
            case = self.untied()
            still = {i for i, (a, b) in enumerate(zip(self.args, case.args)) if a.alias and not b.alias}
        moves = [a.values.kind == "float" and a.grad != "none" and i not in still for i, a in enumerate(case.args)]
        off = not keep_structure
        args = tuple(
            replace(a, values=replace(a.values, nudge=amount, nudge_seed=seed + i, nudge_off=off)) if move else a
            for i, (a, move) in enumerate(zip(case.args, moves))
        )
        data = {i: case._moved(i, t, amount, seed + i, off) if moves[i] else t for i, t in case.data.items()}
        return replace(case, args=args, data=data)

    def _moved(self, i: int, storage: torch.Tensor, amount: float, seed: int, off: bool = False) -> torch.Tensor:
        """Pinned storage ``i`` nudged: each float element (each part of a
        complex one) moved as ``Values`` nudges a draw, kinks avoided again;
        special positions keep their values, and unless ``off``,
        ``values.constant`` dims stay constant (stride-0 dims are: their
        elements are one storage element) and the structure is put back."""
        if not (storage.dtype.is_floating_point or storage.dtype.is_complex):
            return storage
        a, values = self.args[i], self.args[i].values
        parts = torch.view_as_real(storage) if storage.dtype.is_complex else storage
        x = parts.detach().cpu().to(torch.float64).reshape(-1).numpy().copy()
        x += values._step(x.size, amount, seed)
        moved = _tensor(values._pushed(x), parts.dtype).reshape(parts.shape)
        if storage.dtype.is_complex:
            moved = torch.view_as_complex(moved)
        lay, n = a.strided, math.prod(a.shape)
        if values.specials and n:
            where = torch.arange(lay.storage_size).as_strided(a.shape, lay.strides, lay.offset).reshape(-1)
            for pos, _ in values.specials:
                moved[where[pos % n]] = storage[where[pos % n]]
        view = lay.writable_view(moved, a.shape)
        if values.structure and not off:
            before = _array(lay.writable_view(storage.detach().cpu(), a.shape))
            view.copy_(torch.from_numpy(np.asarray(restored(_array(view), before, values.structure))))
        for d in () if off else values.constant:
            if d < view.dim() and view.shape[d] > 1:
                view.copy_(view.narrow(d, 0, 1).expand(view.shape).clone())
        return moved if storage.device == moved.device else moved.to(storage.device)

    def reseeded(self, k: int) -> Case:
        """The same structure with fresh values and probes: variant ``k`` (0 is itself).

        Shapes, layouts, aliasing and dtype are what Hypothesis pays to draw;
        values and probes are a seed each, so one drawn structure is cheaply
        tried at several points.
        """
        if k == 0:
            return self
        # _evolve keeps the cached per-structure plans (_plan, _fills, _leaf_views): only seeds
        # change. (Once per example of every check: kept lean.)
        seeded = self._seeded_params
        params = dict(self.params)
        for key in seeded:
            v = params[key]
            params[key] = {**v, "seed": _mix(v["seed"], k)}
        args = [_evolve(a, values=_evolve(a.values, seed=_mix(a.values.seed, k))) for a in self.args]
        return _evolve(self, data={}, args=tuple(args), params=params)

    @cached_property
    def _seeded_params(self) -> tuple[str, ...]:
        """The params holding a seed of their own (probes): each variant draws them anew."""
        return tuple(
            key for key, v in self.params.items() if (type(v) is dict or isinstance(v, Mapping)) and "seed" in v
        )

    def with_layouts(self, layouts: Sequence[Layout | None]) -> Case:
        """The same logical values in other layouts; arguments that share a
        storage keep their layouts, which place them relative to each other."""
        shared = {self.owner(i) for i, a in enumerate(self.args) if a.alias} | {
            i for i, a in enumerate(self.args) if a.alias
        }
        return replace(
            self,
            data={},
            args=tuple(a if i in shared else replace(a, layout=l) for i, (a, l) in enumerate(zip(self.args, layouts))),
        )

    @property
    def aliased(self) -> bool:
        """Some argument is a view of a leaf storage or shares memory with another."""
        return any(a.alias is not None or a.grad == "view" for a in self.args)

    # -- materialization ---------------------------------------------------------

    def owner(self, i: int) -> int:
        """The argument whose storage argument ``i`` lives in."""
        while (alias := self.args[i].alias) is not None:
            i = alias.of
        return i

    @cached_property
    def _fills(self) -> tuple[_Fill, ...]:
        """How each storage is filled, checked once per structure (reseeded
        variants share it): ``(i, shape, layout, dtype, how, sizes, narrow, bad)``
        per storage-owning argument ``i``. ``how`` is "flat" (the view is the
        contiguous storage itself), "whole" (the view covers the storage) or
        "junk" (memory outside the view is filled too); ``sizes`` is the
        writable view's shape, ``narrow`` the stride-0 dims, ``bad`` an error
        for unpinned values that do not repeat along a stride-0 dim."""
        for i, a in enumerate(self.args):
            if a.alias is not None and not 0 <= a.alias.of < i:
                raise CaseError(f"args[{i}].alias.of must name an earlier argument, got {a.alias.of}")
        fills = []
        for i in sorted({self.owner(i) for i in range(len(self.args))}):
            a, dtype = self.args[i], self.arg_dtype(i)
            lay = a.strided
            lay.check(a.shape, f"args[{i}].layout")
            bad = next(
                (
                    f"args[{i}].layout: stride 0 along dim {d}, but values.constant "
                    f"{list(a.values.constant)} does not make the values repeat there"
                    for d, (n, st) in enumerate(zip(a.shape, lay.strides))
                    if st == 0 and n > 1 and d not in a.values.constant
                ),
                None,
            )
            narrow = tuple(d for d, st in enumerate(lay.strides) if st == 0)
            if lay.storage_size != math.prod(a.shape) or narrow:
                how = "junk"
            elif lay.is_contiguous(a.shape):
                how = "flat"
            else:
                how = "whole"
            sizes = tuple(min(n, 1) if st == 0 else n for n, st in zip(a.shape, lay.strides))
            fills.append((i, tuple(a.shape), lay, dtype, how, sizes, narrow, bad))
        return tuple(fills)

    def _storage(self, i: int) -> torch.Tensor:
        fill = next((f for f in self._fills if f[0] == i), None)
        if fill is None:
            raise CaseError(f"args[{i}] does not own a storage")
        return self._filled(fill)

    def _filled(self, fill: _Fill) -> torch.Tensor:
        i, shape, lay, dtype, how, sizes, narrow, bad = fill
        if i in self.data:
            pinned = self.data[i]
            if pinned.shape != (lay.storage_size,) or pinned.dtype != dtype:
                raise CaseError(
                    f"args[{i}]: pinned data is {pinned.dtype} of shape {list(pinned.shape)}, "
                    f"expected {dtype} of shape [{lay.storage_size}]"
                )
            return pinned.clone() if self.device == "cpu" else pinned.to(self.device)
        if bad is not None:
            raise CaseError(bad)
        values = self.args[i].values
        if how == "flat":
            # sample() returns a fresh contiguous tensor with a storage of its own
            # numel: in this layout it already is the storage, bit for bit.
            storage = values.sample(shape, dtype).reshape(-1)
        else:
            if how == "whole":
                logical = values.sample(shape, dtype)
                storage = torch.empty(lay.storage_size, dtype=logical.dtype)  # the view covers it all
                storage.as_strided(sizes, lay.strides, lay.offset).copy_(logical)
            else:
                # Memory outside the view holds in-domain junk: a kernel that reads it is caught.
                storage = values.filled(shape, dtype, lay, narrow)
        return storage if self.device == "cpu" else storage.to(self.device)

    def storages(self) -> dict[int, torch.Tensor]:
        """Argument index -> the storage it owns, filled; what materialize() views."""
        return {fill[0]: self._filled(fill) for fill in self._fills}

    def materialize(
        self,
        requires_grad: bool = True,
        cast: torch.dtype | None = None,
        storages: dict[int, torch.Tensor] | None = None,
    ) -> Inputs:
        """Build the tensors, bit for bit the same on every call.

        ``cast`` converts the case-dtype storages after their values are drawn:
        a float64 reference holding exactly the float32 case's values (a
        complex case goes to the complex dtype of ``cast``).
        ``storages`` (from ``self.storages()``) reuses values already drawn.
        """
        storages = self.storages() if storages is None else storages
        if cast is not None:
            args, wide = self.args, cast.to_complex()  # a complex case keeps its imaginary part
            storages = {
                i: t
                if args[i].dtype is not None or t.dtype in (cast, wide)
                else t.to(wide if t.dtype.is_complex else cast)
                for i, t in storages.items()
            }
        leaf_views, direct = self._leaf_views
        leaves = []
        for o, view in leaf_views:
            t = (storages[o] if view is None else storages[o].as_strided(*view)).detach()
            leaves.append(t.requires_grad_(True) if requires_grad else t)  # detach(): no grad
        rebuild: Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]
        if direct == "identity":
            rebuild = list  # argument i is leaf i: the common case, rebuilt six times per example
        elif direct is not None:  # every argument is a leaf itself: no views to rebuild

            def rebuild(ls: Sequence[torch.Tensor]) -> list[torch.Tensor]:
                return [ls[k] for k in direct]
        else:
            steps = self._plan[1]

            def rebuild(ls: Sequence[torch.Tensor]) -> list[torch.Tensor]:
                out: list[torch.Tensor] = []
                for kind, k, shape, strides, offset in steps:
                    if kind == "same":
                        out.append(out[k])
                    elif kind == "const":
                        out.append(storages[k].as_strided(shape, strides, offset))
                    elif kind == "view":
                        out.append(ls[k].as_strided(shape, strides, offset))
                    else:
                        out.append(ls[k])
                return out

        if self.copies:
            rebuild = _copying(rebuild, self.copies)
        return Inputs(rebuild(leaves), leaves, rebuild, self._plan[2])

    def recast(self, inputs: Inputs, cast: torch.dtype) -> Inputs | None:
        """``materialize(requires_grad=False, cast=cast)`` made from ``inputs``,
        which this case materialized and nothing has written into since, without
        drawing or viewing again: where every argument is a leaf of its own
        (else None: views and constants are rebuilt from their storages). The
        values are the same; the memory around a strided leaf is not kept."""
        if self.copies or self._leaf_views[1] != "identity":
            return None
        wide = cast.to_complex()
        leaves = [
            t if a.dtype is not None or t.dtype in (cast, wide) else t.to(wide if t.dtype.is_complex else cast)
            for a, t in zip(self.args, (l.detach() for l in inputs.leaves))
        ]
        return Inputs(list(leaves), leaves, list, inputs.sources)

    @cached_property
    def _leaf_views(self):
        """``_plan``'s leaves as ``(storage, as_strided args or None)``, and the
        leaf index of each argument when every argument is a leaf itself (else
        None; "identity" when argument i is leaf i)."""
        keys, steps, _ = self._plan
        views = []
        for o, whole in keys:
            lay = self.args[o].strided
            views.append((o, None if whole else (self.args[o].shape, lay.strides, lay.offset)))
        direct: tuple[int, ...] | str | None = (
            tuple(k for _, k, *_ in steps) if all(step[0] == "leaf" for step in steps) else None
        )
        if direct == tuple(range(len(steps))):
            direct = "identity"
        return tuple(views), direct

    @cached_property
    def _plan(self):
        """How arguments come from storages and leaves; the same for every materialize()."""
        owners = [self.owner(i) for i in range(len(self.args))]
        differentiable = sorted({o for o in owners if self.args[o].grad != "none"})
        whole = {
            owners[i]
            for i, a in enumerate(self.args)
            if a.grad == "view" or (a.alias is not None and a.alias.kind == "view")
        }
        leaf_of = {o: k for k, o in enumerate(differentiable)}
        steps: list[tuple[str, int, tuple[int, ...] | None, tuple[int, ...] | None, int | None]] = []
        sources: list[tuple[int, Layout | None] | None] = []
        for i, a in enumerate(self.args):
            o, lay = owners[i], a.strided
            if a.alias is not None and a.alias.kind == "same":
                steps.append(("same", a.alias.of, None, None, None))
                sources.append(sources[a.alias.of])
            elif o not in leaf_of:
                steps.append(("const", o, a.shape, lay.strides, lay.offset))
                sources.append(None)
            elif o in whole:
                steps.append(("view", leaf_of[o], a.shape, lay.strides, lay.offset))
                sources.append((leaf_of[o], lay))
            else:
                steps.append(("leaf", leaf_of[o], None, None, None))
                sources.append((leaf_of[o], None))
        keys = [(o, o in whole) for o in differentiable]
        return keys, tuple(steps), sources

    # -- JSON ---------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The recipe; pinned ``data`` is not part of it (corpus records store it)."""
        out = _jsonable(asdict(replace(self, data={})))
        del out["data"]
        for arg in out["args"]:
            # written only when set: a case without structured points keeps the
            # record format it always had (docs/pages/design.md, contract 4)
            values = arg["values"]
            if not values.get("structure"):
                values.pop("structure", None)
                if not values.get("nudge_off"):
                    values.pop("nudge_off", None)
        if not out["copies"]:
            del out["copies"]
        return out

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Case:
        return case_from_json(data)


def _copying(
    rebuild: Callable[[Sequence[torch.Tensor]], list[torch.Tensor]], copies: tuple[int, ...]
) -> Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]:
    """``rebuild`` with arguments ``copies`` made contiguous copies (differentiable)."""

    def rebuild_copies(leaves: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return [t.contiguous() if i in copies else t for i, t in enumerate(rebuild(leaves))]

    return rebuild_copies


def _mix(seed: int, k: int) -> int:
    """A seed for variant ``k``, far from seed + 1 (splitmix64's constants)."""
    z = (int(seed) + 0x9E3779B97F4A7C15 * k) & 0xFFFF_FFFF_FFFF_FFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFF_FFFF_FFFF_FFFF
    return (z ^ (z >> 31)) & 0xFFFF_FFFF


def _jsonable(x: Any) -> Any:
    if isinstance(x, float):
        if math.isfinite(x):
            return x
        return {"float": x.hex()}
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


# -- reading a Case back from JSON ------------------------------------------------
#
# Nothing here runs code from the file: it is plain JSON, checked field by field,
# and a bad field is a CaseError that names it.


def decode_floats(x: Any) -> Any:
    """Undo the ``{"float": hex}`` encoding used for inf and nan."""
    if isinstance(x, dict):
        if set(x) == {"float"} and isinstance(x["float"], str):
            return float.fromhex(x["float"])
        return {k: decode_floats(v) for k, v in x.items()}
    if isinstance(x, list):
        return [decode_floats(v) for v in x]
    return x


def _get(data: Mapping[str, Any], key: str, where: str, types: Any, default: Any = ...) -> Any:
    if not isinstance(data, Mapping):
        raise CaseError(f"{where}: expected an object, got {type(data).__name__}")
    if key not in data:
        if default is ...:
            raise CaseError(f"{where}.{key}: missing field")
        return default
    value = data[key]
    if types is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if types is not None and not isinstance(value, types) or isinstance(value, bool) and types in (int, float):
        raise CaseError(f"{where}.{key}: expected {getattr(types, '__name__', types)}, got {value!r}")
    return value


def _ints(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise CaseError(f"{where}: expected a list of integers, got {value!r}")
    return tuple(value)


def _floats(value: list[Any], where: str) -> tuple[float, ...]:
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        raise CaseError(f"{where}: expected a list of numbers, got {value!r}")
    return tuple(float(v) for v in value)


def _values(d: Mapping[str, Any], where: str) -> Values:
    specials = []
    for k, item in enumerate(_get(d, "specials", where, list, [])):
        if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], int) or item[1] not in SPECIALS:
            raise CaseError(f"{where}.specials[{k}]: expected [position, one of {SPECIALS}], got {item!r}")
        specials.append((item[0], item[1]))
    kind = _get(d, "kind", where, str, "float")
    if kind not in ("float", "int", "bool"):
        raise CaseError(f"{where}.kind: expected 'float', 'int' or 'bool', got {kind!r}")
    grid = _get(d, "grid", where, (int, float, type(None)), None)
    low, high = _get(d, "low", where, float, -2.0), _get(d, "high", where, float, 2.0)
    if not (math.isfinite(low) and math.isfinite(high) and low <= high):
        raise CaseError(f"{where}: need finite low <= high, got [{low}, {high}]")
    return Values(
        seed=_get(d, "seed", where, int, 0),
        low=low,
        high=high,
        grid=None if grid is None else float(grid),
        specials=tuple(specials),
        avoid=_floats(_get(d, "avoid", where, list, []), f"{where}.avoid"),
        margin=_get(d, "margin", where, float, 0.0),
        distinct=_get(d, "distinct", where, bool, False),
        kind=kind,
        nudge=_get(d, "nudge", where, float, 0.0),
        nudge_seed=_get(d, "nudge_seed", where, int, 0),
        constant=_ints(_get(d, "constant", where, list, []), f"{where}.constant"),
        structure=_structure(_get(d, "structure", where, list, []), f"{where}.structure"),
        nudge_off=_get(d, "nudge_off", where, bool, False),
    )


def _structure(items: list[Any], where: str) -> tuple[tuple[str, int], ...]:
    out = []
    for k, item in enumerate(items):
        if (
            not isinstance(item, list)
            or len(item) != 2
            or item[0] not in STRUCTURES
            or not isinstance(item[1], int)
            or isinstance(item[1], bool)
            or item[1] < 0
        ):
            raise CaseError(f"{where}[{k}]: expected [one of {STRUCTURES}, a non-negative integer], got {item!r}")
        out.append((item[0], item[1]))
    return tuple(out)


def _arg(d: Mapping[str, Any], where: str) -> Arg:
    shape = _ints(_get(d, "shape", where, list), f"{where}.shape")
    if any(s < 0 for s in shape):
        raise CaseError(f"{where}.shape: negative size in {list(shape)}")
    layout = _get(d, "layout", where, (dict, type(None)), None)
    if layout is not None:
        lw = f"{where}.layout"
        layout = Layout(
            _get(layout, "storage_size", lw, int),
            _ints(_get(layout, "strides", lw, list), f"{lw}.strides"),
            _get(layout, "offset", lw, int, 0),
        )
        layout.check(shape, lw)
    alias = _get(d, "alias", where, (dict, type(None)), None)
    if alias is not None:
        aw = f"{where}.alias"
        kind = _get(alias, "kind", aw, str)
        if kind not in ("same", "view"):
            raise CaseError(f"{aw}.kind: expected 'same' or 'view', got {kind!r}")
        alias = Alias(_get(alias, "of", aw, int), kind)
    grad = _get(d, "grad", where, str, "leaf")
    if grad not in ("leaf", "view", "none"):
        raise CaseError(f"{where}.grad: expected 'leaf', 'view' or 'none', got {grad!r}")
    dtype = _get(d, "dtype", where, (str, type(None)), None)
    if dtype is not None and dtype not in DTYPES:
        raise CaseError(f"{where}.dtype: unknown dtype {dtype!r}")
    return Arg(shape, _values(_get(d, "values", where, dict, {}), f"{where}.values"), layout, alias, grad, dtype)


def case_from_json(data: Mapping[str, Any], where: str = "case") -> Case:
    data = decode_floats(data)
    args = _get(data, "args", where, list)
    dtype = _get(data, "dtype", where, str, "float64")
    if dtype not in DTYPES:
        raise CaseError(f"{where}.dtype: unknown dtype {dtype!r}; expected one of {sorted(DTYPES)}")
    case = Case(
        target=_get(data, "target", where, str),
        args=tuple(_arg(a, f"{where}.args[{i}]") for i, a in enumerate(args)),
        dtype=dtype,
        device=_get(data, "device", where, str, "cpu"),
        kwargs=_get(data, "kwargs", where, dict, {}),
        params=_get(data, "params", where, dict, {}),
        copies=_ints(_get(data, "copies", where, list, []), f"{where}.copies"),
    )
    if any(not 0 <= i < len(case.args) for i in case.copies):
        raise CaseError(f"{where}.copies: argument indices in [0, {len(case.args)}), got {list(case.copies)}")
    for i, a in enumerate(case.args):
        if a.alias is not None and not 0 <= a.alias.of < i:
            raise CaseError(f"{where}.args[{i}].alias.of: must name an earlier argument, got {a.alias.of}")
    return case
