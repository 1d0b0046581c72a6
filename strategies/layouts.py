"""Layouts: the same logical values in other memory arrangements.

A layout is a recipe over a base storage (storage size, strides, offset); see
fuzzdiff.case.Layout. Every feature is drawn independently and shrinks to the
plain contiguous layout, so a shrunk failure keeps only the feature that matters.
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from fuzzdiff.case import Layout
from strategies._validation import check_int

__all__ = ["strided", "layouts", "LAYOUT_FEATURES"]

LAYOUT_FEATURES = ("permuted", "sliced", "offset", "expanded", "channels_last")


def strided(shape: Sequence[int], *, perm: Sequence[int] | None = None,
            steps: Sequence[int] | None = None, offset: int = 0,
            expand: Sequence[int] = (), tail: int = 0) -> Layout:
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


def layouts(shape: Sequence[int], *, features: Sequence[str] = LAYOUT_FEATURES,
            max_step: int = 3, max_offset: int = 5, expandable: Sequence[int] | None = None):
    """Layouts for ``shape`` combining any of ``features``; shrinks to contiguous.

    Include "expanded" (stride 0) only for arguments the target never writes:
    an in-place op on a stride-0 tensor is an error, not a bug. ``expandable``
    limits which dims may get stride 0 (those along which the values repeat).
    """
    shape = tuple(shape)
    unknown = set(features) - set(LAYOUT_FEATURES)
    if unknown:
        raise InvalidArgument(f"unknown layout features {sorted(unknown)}; expected {LAYOUT_FEATURES}")
    check_int(max_step, "max_step", min_value=1)
    check_int(max_offset, "max_offset", min_value=0)
    dims = tuple(range(len(shape))) if expandable is None else tuple(
        sorted(set(expandable) & set(range(len(shape)))))
    return _layout_strategy(shape, tuple(features), max_step, max_offset, dims)


@functools.lru_cache(maxsize=4096)
def _layout_strategy(shape, features, max_step, max_offset, expandable):
    # Cached: cases() asks for one per argument on every draw, and Hypothesis
    # validates each fresh strategy object again.
    return _draw_layout(shape, features, max_step, max_offset, expandable)


# Module level: st.composite inspects the function's source when it decorates,
# which costs milliseconds, so it must not run once per draw.
@st.composite
def _draw_layout(draw, shape: tuple[int, ...], features: tuple[str, ...], max_step: int,
                 max_offset: int, expandable: tuple[int, ...]) -> Layout:
    rank = len(shape)
    perm = tuple(range(rank))
    if "channels_last" in features and rank == 4 and draw(st.booleans()):
        perm = (0, 2, 3, 1)
    elif "permuted" in features and rank >= 2 and draw(st.booleans()):
        perm = tuple(draw(st.permutations(range(rank))))
    steps = (1,) * rank
    if "sliced" in features and rank and draw(st.booleans()):
        steps = tuple(draw(st.lists(st.integers(1, max_step), min_size=rank, max_size=rank)))
    offset = 0
    if "offset" in features and draw(st.booleans()):
        offset = draw(st.integers(1, max(1, max_offset)))
    expand: tuple[int, ...] = ()
    if "expanded" in features and expandable and draw(st.booleans()):
        expand = tuple(sorted(draw(st.sets(st.sampled_from(expandable), min_size=1))))
    tail = draw(st.integers(0, 2))
    return strided(shape, perm=perm, steps=steps, offset=offset, expand=expand, tail=tail)
