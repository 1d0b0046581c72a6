"""Layouts: the same logical values in other memory arrangements.

A layout is a recipe over a base storage (storage size, strides, offset); see
fuzzdiff.case.layout.Layout. Every feature is drawn independently and shrinks to the
plain contiguous layout, so a shrunk failure keeps only the feature that matters.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import DrawFn, SearchStrategy

from fuzzdiff.case.layout import Layout
from strategies._drawing import integers
from strategies._validation import check_int

__all__ = [
    "strided",
    "layouts",
    "check_layout_features",
    "check_layout_class",
    "layout_class_applies",
    "LAYOUT_FEATURES",
    "LAYOUT_CLASSES",
]

LAYOUT_FEATURES = ("permuted", "sliced", "offset", "expanded", "channels_last")
# The layout classes a campaign's first batch of a pair meets one by one
# (a tour, fuzzdiff.search.fuzzing.FuzzConfig.layout_tour): each forces its
# feature on in every argument it applies to. Stride 0 has a class per end of
# the shape, so that a reduction meets it along a reduced dim and a kept one
# (a reduction over the last dim or over all; a batch dim kept in front).
LAYOUT_CLASSES = ("contiguous", "permuted", "sliced", "offset", "stride0:first", "stride0:last", "channels_last")
_CLASS_FEATURE = {
    "permuted": "permuted",
    "sliced": "sliced",
    "offset": "offset",
    "stride0:first": "expanded",
    "stride0:last": "expanded",
    "channels_last": "channels_last",
}


def strided(
    shape: Sequence[int],
    *,
    perm: Sequence[int] | None = None,
    steps: Sequence[int] | None = None,
    offset: int = 0,
    expand: Sequence[int] = (),
    tail: int = 0,
) -> Layout:
    """The layout that stores dims in ``perm`` order (outermost first), every
    ``steps[d]``-th element along dim d, from ``offset``, with ``expand`` dims at stride 0."""
    rank = len(shape)
    perm = tuple(range(rank)) if perm is None else tuple(perm)
    steps = (1,) * rank if steps is None else tuple(steps)
    if sorted(perm) != list(range(rank)):
        raise InvalidArgument(f"perm={perm!r} is not a permutation of range({rank})")
    if len(steps) != rank or any(s < 1 for s in steps):
        raise InvalidArgument(f"steps={steps!r} needs {rank} positive entries")
    if any(not 0 <= d < rank for d in expand):
        raise InvalidArgument(f"expand={tuple(expand)!r} names a dim outside range({rank})")
    check_int(offset, "offset", min_value=0)
    check_int(tail, "tail", min_value=0)
    strides = [0] * rank
    acc = 1
    for d in reversed(perm):
        if d in expand:
            continue
        strides[d] = acc * steps[d]
        acc *= steps[d] * max(shape[d], 1)
    for d in expand:
        strides[d] = 0
    if math.prod(shape) == 0:
        span = 0
    else:
        span = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    return Layout(offset + span + tail, tuple(strides), offset)


def check_layout_features(features: Sequence[str]) -> None:
    """InvalidArgument naming what is not one of LAYOUT_FEATURES."""
    unknown = set(features) - set(LAYOUT_FEATURES)
    if unknown:
        raise InvalidArgument(f"unknown layout features {sorted(unknown)}; expected {LAYOUT_FEATURES}")


def check_layout_class(name: str | None) -> None:
    """InvalidArgument naming a layout class that is not one of LAYOUT_CLASSES."""
    if name is not None and name not in LAYOUT_CLASSES:
        raise InvalidArgument(f"unknown layout class {name!r}; expected one of {LAYOUT_CLASSES}")


def layout_class_applies(name: str, ranks: Sequence[int | None], features: Sequence[str]) -> bool:
    """Whether forcing layout class ``name`` can change an argument of one of
    ``ranks`` (None: any rank, a variadic spec) under the drawn ``features``."""
    check_layout_class(name)
    if name == "contiguous":
        return True
    if _CLASS_FEATURE[name] not in features:
        return False
    least = {"permuted": 2, "channels_last": 4}.get(name, 1)
    return any(r is None or (r == 4 if name == "channels_last" else r >= least) for r in ranks)


def layouts(
    shape: Sequence[int],
    *,
    features: Sequence[str] = LAYOUT_FEATURES,
    max_step: int = 3,
    max_offset: int = 5,
    expandable: Sequence[int] | None = None,
) -> SearchStrategy[Layout]:
    """Layouts for ``shape`` combining any of ``features``; shrinks to contiguous.

    Include "expanded" (stride 0) only for arguments the target never writes:
    an in-place op on a stride-0 tensor is an error, not a bug. ``expandable``
    limits which dims may get stride 0 (those along which the values repeat).
    """
    shape = tuple(shape)
    check_layout_features(features)
    check_int(max_step, "max_step", min_value=1)
    check_int(max_offset, "max_offset", min_value=0)
    dims = tuple(range(len(shape))) if expandable is None else tuple(sorted(set(expandable) & set(range(len(shape)))))
    return _layout_strategy(shape, tuple(features), max_step, max_offset, dims)


@functools.lru_cache(maxsize=4096)
def _layout_strategy(
    shape: tuple[int, ...], features: tuple[str, ...], max_step: int, max_offset: int, expandable: tuple[int, ...]
) -> SearchStrategy[Layout]:
    # Cached: cases() asks for one per argument on every draw, and Hypothesis
    # validates each fresh strategy object again.
    return _draw_layout(shape, features, max_step, max_offset, expandable)


# Module level: st.composite inspects the function's source when it decorates,
# which costs milliseconds, so it must not run once per draw.
@st.composite
def _draw_layout(
    draw: DrawFn,
    shape: tuple[int, ...],
    features: tuple[str, ...],
    max_step: int,
    max_offset: int,
    expandable: tuple[int, ...],
) -> Layout:
    return draw_layout(draw, shape, features, max_step, max_offset, expandable)


def draw_layout(
    draw: DrawFn,
    shape: tuple[int, ...],
    features: tuple[str, ...],
    max_step: int = 3,
    max_offset: int = 5,
    expandable: tuple[int, ...] | None = None,
    force: str | None = None,
) -> Layout:
    """The draws of ``layouts(...)`` made with a caller's ``draw`` (cases() calls
    this inside its own composite rather than drawing a nested strategy).
    ``force`` (one of LAYOUT_CLASSES) turns its class on wherever it applies
    (or every feature off, for "contiguous"), with the same draws, so that a
    case shrinks within its class.

    Each Hypothesis draw costs more than the torch work of a small example, so
    one integer says which features are on (a bit each, fair coins) and how
    much tail the storage has; each feature that is on then draws its
    parameter as one integer. Every code shrinks toward 0: contiguous, no
    offset, no tail, the identity permutation, unit steps.
    """
    shape = tuple(shape)
    rank = len(shape)
    if expandable is None:
        expandable = tuple(range(rank))
    bits, code_strategy = _feature_code(rank, features, bool(expandable))
    code = draw(code_strategy)
    on = {name for k, name in enumerate(bits) if name is not None and code >> k & 1}
    tail = code >> len(bits)
    forced = _CLASS_FEATURE.get(force or "")
    if force == "contiguous":
        on, tail = set(), 0
    elif forced is not None and forced in bits and bits[bits.index(forced)] is not None:
        on.add(forced)
        if forced in ("permuted", "sliced", "channels_last"):
            on.discard("expanded")  # a stride-0 dim has no order and no step to show
    perm = tuple(range(rank))
    if "channels_last" in on:
        perm = (0, 2, 3, 1)
    elif "permuted" in on:
        # forced: not the identity (index 0)
        perm = _nth_permutation(rank, draw(integers(int(forced == "permuted"), math.factorial(rank) - 1)))
    steps = (1,) * rank
    if "sliced" in on:
        # forced: some step above 1 (code 0 is every step 1)
        steps = _digits(draw(integers(int(forced == "sliced" and max_step > 1), max_step**rank - 1)), max_step, rank)
    offset = 0
    if "offset" in on:
        offset = draw(integers(1, max(1, max_offset)))
    expand: tuple[int, ...] = ()
    if "expanded" in on:
        subset = draw(integers(1, 2 ** len(expandable) - 1))
        expand = tuple(d for k, d in enumerate(expandable) if subset >> k & 1)
        end = {"stride0:first": 0, "stride0:last": rank - 1}.get(force or "")
        if end is not None and end in expandable and end not in expand:
            expand = tuple(sorted((*expand, end)))
    return strided(shape, perm=perm, steps=steps, offset=offset, expand=expand, tail=tail)


TAILS = 3  # storage elements past the view: 0, 1 or 2


@functools.lru_cache(maxsize=256)
def _feature_code(
    rank: int, features: tuple[str, ...], expandable: bool
) -> tuple[tuple[str | None, ...], SearchStrategy[int]]:
    """The feature that each bit of the code stands for, and the code's strategy.

    A feature keeps its bit at every rank (one that does not apply at this
    rank, such as "permuted" for a vector, is on to no effect), so that when
    shrinking drops a dim the code still means the same layout features.
    """
    bits = tuple(f for f in LAYOUT_FEATURES if f in features)
    applies = {
        "channels_last": rank == 4,
        "permuted": rank >= 2,
        "sliced": rank >= 1,
        "offset": True,
        "expanded": expandable,
    }
    live = tuple(f if applies[f] else None for f in bits)
    return live, integers(0, (TAILS << len(bits)) - 1)


def _nth_permutation(rank: int, index: int) -> tuple[int, ...]:
    """Permutation number ``index`` of range(rank) in lexicographic order (0: identity)."""
    pool, out = list(range(rank)), []
    for k in range(rank, 0, -1):
        f = math.factorial(k - 1)
        out.append(pool.pop(index // f))
        index %= f
    return tuple(out)


def _digits(code: int, base: int, rank: int) -> tuple[int, ...]:
    """``rank`` steps in 1..base from one code; dim 0 is the most significant digit."""
    out = []
    for _ in range(rank):
        code, d = divmod(code, base)
        out.append(1 + d)
    return tuple(reversed(out))
