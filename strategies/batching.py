"""Batching: what vmap is asked to do with a case's arguments.

Batch sizes, per-argument ``in_dims`` (0, 1, -1 or None, at least one argument
batched), ``out_dims``, the memory layout of each batched input, and which
composition of vmap with vjp, jvp, grad or another vmap to run. A plan is
plain data (a dict of lists), stored in ``case.params`` so a failing case
replays from its JSON; it shrinks toward one level of plain vmap over dim 0,
batch size 1, contiguous inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import DrawFn, SearchStrategy

from strategies._validation import check_int, check_range
from strategies.layouts import LAYOUT_FEATURES, layouts

__all__ = [
    "COMPOSITIONS",
    "IN_DIMS",
    "OUT_DIMS",
    "BATCHED_LAYOUT_FEATURES",
    "batch_sizes",
    "in_dims",
    "out_dims",
    "compositions",
    "batched_shape",
    "batching",
]

# vmap over the target; vmap of vjp / jvp / grad (per-example cotangents and
# tangents); vjp / jvp of the vmapped target; vmap of vmap.
COMPOSITIONS = ("vmap", "vmap_vjp", "vjp_vmap", "vmap_jvp", "jvp_vmap", "vmap_vmap", "vmap_grad")
NESTED = {"vmap_vmap": 2}  # levels of vmap per composition; 1 when absent
IN_DIMS = (0, 1, -1, None)
OUT_DIMS = (0, 1, -1)
# No stride 0: an expanded batch dim would hold identical copies, never distinct examples.
BATCHED_LAYOUT_FEATURES = tuple(f for f in LAYOUT_FEATURES if f != "expanded")


def _fits(dim: int | None, rank: int) -> bool:
    """Whether ``dim`` is a valid batch dim of a tensor whose examples have ``rank``."""
    return dim is None or -(rank + 1) <= dim <= rank


def batch_sizes(min_size: int = 1, max_size: int = 5) -> SearchStrategy[int]:
    """Batch sizes; shrinks toward ``min_size``."""
    check_range(min_size, max_size, "min_size", "max_size")
    check_int(min_size, "min_size", min_value=1)
    return st.integers(min_size, max_size)


def in_dims(ranks: Sequence[int], *, choices: Sequence[int | None] = IN_DIMS) -> SearchStrategy[tuple[int | None, ...]]:
    """One batch dim per argument, from ``choices`` where it fits the argument's
    rank (1 needs rank >= 1); at least one argument is batched."""
    ranks = tuple(ranks)
    for k, r in enumerate(ranks):
        check_int(r, f"ranks[{k}]", min_value=0)
    choices = tuple(choices)
    if not choices or any(c is not None and not isinstance(c, int) for c in choices):
        raise InvalidArgument(f"choices={choices!r} must be a non-empty sequence of ints or None")
    options = tuple(tuple(c for c in choices if _fits(c, r)) for r in ranks)
    if any(not o for o in options):
        raise InvalidArgument(f"choices={choices!r} has no dim that fits ranks={ranks!r}")
    if not any(c is not None for o in options for c in o):
        raise InvalidArgument(f"choices={choices!r} batch none of the arguments (ranks={ranks!r})")
    return _draw_in_dims(options)


@st.composite
def _draw_in_dims(draw: DrawFn, options: tuple[tuple[int | None, ...], ...]) -> tuple[int | None, ...]:
    dims = [draw(st.sampled_from(o)) for o in options]
    if all(d is None for d in dims):
        k = draw(st.sampled_from([k for k, o in enumerate(options) if any(c is not None for c in o)]))
        dims[k] = next(c for c in options[k] if c is not None)
    return tuple(dims)


def out_dims(*, max_outputs: int = 3, choices: Sequence[int] = OUT_DIMS) -> SearchStrategy[tuple[int, ...]]:
    """Output batch dims, cycled over the outputs (their number is known only
    at run time); a dim that does not fit an output's rank means 0 there."""
    check_int(max_outputs, "max_outputs", min_value=1)
    choices = tuple(choices)
    if not choices or any(not isinstance(c, int) or isinstance(c, bool) for c in choices):
        raise InvalidArgument(f"choices={choices!r} must be a non-empty sequence of ints")
    return st.lists(st.sampled_from(choices), min_size=1, max_size=max_outputs).map(tuple)


def compositions(choices: Sequence[str] = COMPOSITIONS) -> SearchStrategy[str]:
    choices = tuple(choices)
    unknown = set(choices) - set(COMPOSITIONS)
    if not choices or unknown:
        raise InvalidArgument(f"choices={choices!r} must be a non-empty subset of {COMPOSITIONS}")
    return st.sampled_from(choices)


def batched_shape(shape: Sequence[int], levels: Sequence[tuple[int, int | None]]) -> tuple[int, ...]:
    """``shape`` with a batch dim inserted per ``(batch, dim)`` level, innermost
    last in ``levels`` (the order vmap levels are listed: outermost first)."""
    out = list(shape)
    for batch, dim in reversed(levels):
        if dim is None:
            continue
        if not _fits(dim, len(out)):
            raise InvalidArgument(f"dim={dim} does not fit a rank-{len(out)} tensor")
        out.insert(dim if dim >= 0 else len(out) + 1 + dim, batch)
    return tuple(out)


def batching(
    shapes: Sequence[Sequence[int]],
    *,
    choices: Sequence[str] = COMPOSITIONS,
    max_batch: int = 5,
    in_dim_choices: Sequence[int | None] = IN_DIMS,
    layout_features: Sequence[str] = BATCHED_LAYOUT_FEATURES,
) -> SearchStrategy[dict[str, Any]]:
    """A batching plan for arguments of ``shapes``: ``{"composition", "levels",
    "batched_layouts"}``. ``levels`` lists each vmap level, outermost first, as
    ``{"batch", "in_dims", "out_dims"}``; ``batched_layouts[i]`` is the layout of argument
    i's batched tensor (a Layout's fields), or None where no level batches it."""
    sizes = tuple(tuple(s) for s in shapes)
    if not sizes:
        raise InvalidArgument("vmap needs at least one argument to batch")
    check_int(max_batch, "max_batch", min_value=1)
    bad = set(layout_features) - set(BATCHED_LAYOUT_FEATURES)
    if bad:
        raise InvalidArgument(f"layout_features {sorted(bad)} are not among {BATCHED_LAYOUT_FEATURES}")
    compositions(choices)  # validates
    in_dims([len(s) for s in sizes], choices=in_dim_choices)  # validates
    return _draw_batching(sizes, tuple(choices), max_batch, tuple(in_dim_choices), tuple(layout_features))


@st.composite
def _draw_batching(
    draw: DrawFn,
    shapes: tuple[tuple[int, ...], ...],
    choices: tuple[str, ...],
    max_batch: int,
    in_dim_choices: tuple[int | None, ...],
    features: tuple[str, ...],
) -> dict[str, Any]:
    composition = draw(compositions(choices))
    ranks = [len(s) for s in shapes]
    levels: list[dict[str, Any]] = []  # drawn innermost first: an outer level sees the inner batch dims
    for _ in range(NESTED.get(composition, 1)):
        dims = draw(in_dims(ranks, choices=in_dim_choices))
        levels.insert(
            0, {"batch": draw(batch_sizes(1, max_batch)), "in_dims": list(dims), "out_dims": list(draw(out_dims()))}
        )
        ranks = [r + (d is not None) for r, d in zip(ranks, dims)]
    lays: list[dict[str, Any] | None] = []
    for k, shape in enumerate(shapes):
        per_level = [(l["batch"], l["in_dims"][k]) for l in levels]
        if all(d is None for _, d in per_level):
            lays.append(None)
            continue
        lay = draw(layouts(batched_shape(shape, per_level), features=features))
        lays.append({"storage_size": lay.storage_size, "strides": list(lay.strides), "offset": lay.offset})
    return {"composition": composition, "levels": levels, "batched_layouts": lays}
