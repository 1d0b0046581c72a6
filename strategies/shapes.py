"""Shapes: ranks and sizes (0 and 1 included), named-dim specs, broadcasting."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.extra import numpy as hnp
from hypothesis.strategies import DrawFn, SearchStrategy

from fuzzdiff.case.spec import ArgSpec, Dim, SpecError, parse_spec
from strategies._drawing import COIN, eager, integers
from strategies._validation import check_int, check_range

__all__ = ["shapes", "broadcastable_shapes", "spec_shapes"]


def shapes(
    *, min_rank: int = 0, max_rank: int = 4, min_side: int = 0, max_side: int = 5
) -> SearchStrategy[tuple[int, ...]]:
    """Tuples of ``min_rank..max_rank`` sizes in ``min_side..max_side``; shrink toward ()."""
    check_range(min_rank, max_rank, "min_rank", "max_rank")
    check_range(min_side, max_side, "min_side", "max_side")
    return hnp.array_shapes(min_dims=min_rank, max_dims=max_rank, min_side=min_side, max_side=max_side).map(tuple)


def broadcastable_shapes(
    shape: tuple[int, ...],
    *,
    min_rank: int = 0,
    max_rank: int | None = None,
    min_side: int = 0,
    max_side: int | None = None,
) -> SearchStrategy[tuple[int, ...]]:
    """Shapes that broadcast against ``shape`` (some dims 1 or missing)."""
    if not isinstance(shape, tuple) or not all(isinstance(s, int) and s >= 0 for s in shape):
        raise InvalidArgument(f"shape={shape!r} must be a tuple of non-negative ints")
    max_rank = len(shape) if max_rank is None else max_rank
    check_range(min_rank, max_rank, "min_rank", "max_rank")
    return hnp.broadcastable_shapes(
        shape, min_dims=min_rank, max_dims=max_rank, min_side=min_side, max_side=max_side
    ).map(tuple)


@st.composite
def _spec_shapes(
    draw: DrawFn,
    args: tuple[ArgSpec, ...],
    min_side: int,
    max_side: int,
    max_variadic: int,
    fixed: Mapping[str, int],
) -> dict[str, tuple[int, ...]]:
    return draw_spec_shapes(draw, args, min_side, max_side, max_variadic, fixed)


def draw_spec_shapes(
    draw: DrawFn,
    args: tuple[ArgSpec, ...],
    min_side: int,
    max_side: int,
    max_variadic: int = 2,
    fixed: Mapping[str, int] | Iterable[tuple[str, int]] = (),
) -> dict[str, tuple[int, ...]]:
    """The draws of ``spec_shapes(...)`` made with a caller's ``draw`` (cases()
    calls this inside its own composite); ``fixed`` is a mapping or pairs."""
    sizes: dict[str, int] = dict(fixed)
    groups: dict[str, tuple[int, ...]] = {}
    side = integers(min_side, max_side)
    out: dict[str, tuple[int, ...]] = {}
    for arg in args:
        shape: list[int] = []
        for dim in arg.dims:
            if dim.kind == "fixed":
                assert dim.size is not None  # a "fixed" dim has its size
                shape.append(dim.size)
            elif dim.variadic:
                if dim.kind == "anon":
                    group = _draw_group(draw, min_side, max_side, max_variadic)
                else:
                    assert dim.name is not None  # a named group
                    if dim.name not in groups:
                        groups[dim.name] = _draw_group(draw, *_bounded(dim, min_side, max_side), max_variadic)
                    group = groups[dim.name]
                    if dim.broadcast:
                        keep = draw(_keeps(len(group)))
                        group = tuple(g if k else 1 for g, k in zip(group, keep))
                shape.extend(group)
            elif dim.kind == "anon":
                shape.append(draw(side))
            else:
                assert dim.name is not None  # a named dim
                if dim.name not in sizes:
                    bounded = _bounded(dim, min_side, max_side)
                    sizes[dim.name] = draw(side if bounded == (min_side, max_side) else integers(*bounded))
                size = sizes[dim.name]
                if dim.broadcast and draw(COIN):
                    size = 1
                shape.append(size)
        out[arg.name] = tuple(shape)
    return out


@functools.lru_cache(maxsize=64)
def _keeps(n: int) -> SearchStrategy[list[bool]]:
    return eager(st.lists(st.booleans(), min_size=n, max_size=n))


def spec_shapes(
    spec: str | tuple[ArgSpec, ...],
    *,
    min_side: int = 0,
    max_side: int = 4,
    max_variadic: int = 2,
    fixed: Mapping[str, int] | None = None,
) -> SearchStrategy[dict[str, tuple[int, ...]]]:
    """``{argument name: shape}`` for a spec (docs/pages/design.md, contract 3).

    A named dim has one size for every argument that names it; ``#`` dims may
    be 1 instead; ``*name`` groups are shared; ``_`` and ``...`` are drawn per
    argument. ``fixed`` pins named sizes (``{"n": 3}``).
    """
    if isinstance(spec, str):
        try:
            spec = parse_spec(spec)
        except SpecError as e:
            raise InvalidArgument(f"spec={e.spec!r} is malformed: {e.reason}") from None
    check_range(min_side, max_side, "min_side", "max_side")
    check_int(max_variadic, "max_variadic", min_value=0)
    return _spec_shapes_strategy(tuple(spec), min_side, max_side, max_variadic, tuple(sorted((fixed or {}).items())))


@functools.lru_cache(maxsize=1024)
def _spec_shapes_strategy(
    spec: tuple[ArgSpec, ...], min_side: int, max_side: int, max_variadic: int, fixed: tuple[tuple[str, int], ...]
) -> SearchStrategy[dict[str, tuple[int, ...]]]:
    # Cached: cases() asks for it on every draw, and Hypothesis validates each
    # fresh strategy object again.
    return _spec_shapes(spec, min_side, max_side, max_variadic, dict(fixed))


def _bounded(dim: Dim, min_side: int, max_side: int) -> tuple[int, int]:
    """The sizes a named dim may take: its spec bounds (``n>=1``) within the
    target's sides, and a lower bound above the largest side still drawn."""
    low = min_side if dim.low is None else max(min_side, dim.low)
    if dim.high is not None:  # a spec's upper bound wins over a caller's least side
        low = min(low, max(dim.high, dim.low or 0))
    high = max_side if dim.high is None else min(max_side, dim.high)
    return low, max(low, high)


def _draw_group(draw: DrawFn, min_side: int, max_side: int, max_variadic: int) -> tuple[int, ...]:
    """A variadic group: a list of sizes, so that shrinking can drop any one dim."""
    return tuple(draw(_groups(min_side, max_side, max_variadic)))


@functools.lru_cache(maxsize=256)
def _groups(min_side: int, max_side: int, max_variadic: int) -> SearchStrategy[list[int]]:
    return eager(st.lists(st.integers(min_side, max_side), max_size=max_variadic))
