"""Aliasing between arguments: one storage seen through several arguments.

Four relations PyTorch's fixed samples almost never exercise: the same tensor
passed twice, overlapping views of one storage, disjoint views of one storage,
and non-leaf views whose base requires grad.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import DrawFn, SearchStrategy

from fuzzdiff.case.case import Arg
from fuzzdiff.case.layout import Alias, Layout
from strategies._drawing import COIN, eager, integers
from strategies.layouts import strided

__all__ = ["aliasing", "ALIAS_KINDS"]

ALIAS_KINDS = ("same", "overlap", "disjoint")


def _span(a: Arg) -> tuple[int, int]:
    """First and one-past-last storage element the argument touches."""
    lay = a.strided
    if math.prod(a.shape) == 0:
        return lay.offset, lay.offset
    return lay.offset, lay.offset + 1 + sum((n - 1) * s for n, s in zip(a.shape, lay.strides))


def aliasing(
    args: Sequence[Arg],
    groups: Sequence[Hashable | None],
    *,
    kinds: Sequence[str] = ALIAS_KINDS,
    views: bool = True,
    require: bool = False,
) -> SearchStrategy[tuple[Arg, ...]]:
    """``args`` with some of them made to share storage.

    ``groups[i]`` is None for an argument that must not alias; arguments alias
    only within one group (same dtype and value domain). With ``views``, a
    differentiable argument may become a non-leaf view of a leaf storage.
    With ``require``, at least one argument is aliased or a view (when any
    argument may be). Shrinks toward no aliasing at all.
    """
    args = tuple(args)
    if len(groups) != len(args):
        raise InvalidArgument(f"groups has {len(groups)} entries for {len(args)} args")
    bad = set(kinds) - set(ALIAS_KINDS)
    if bad:
        raise InvalidArgument(f"unknown alias kinds {sorted(bad)}; expected a subset of {ALIAS_KINDS}")
    return _draw_aliasing(args, tuple(groups), tuple(kinds), views, require)


# Module level: st.composite inspects the function's source when it decorates,
# which costs milliseconds, so it must not run once per draw.
@st.composite
def _draw_aliasing(
    draw: DrawFn,
    args: tuple[Arg, ...],
    groups: tuple[Hashable | None, ...],
    kinds: tuple[str, ...],
    views: bool,
    require: bool,
) -> tuple[Arg, ...]:
    return draw_aliasing(draw, args, groups, kinds, views, require)


def draw_aliasing(
    draw: DrawFn,
    args: tuple[Arg, ...],
    groups: tuple[Hashable | None, ...],
    kinds: tuple[str, ...] = ALIAS_KINDS,
    views: bool = True,
    require: bool = False,
) -> tuple[Arg, ...]:
    """The draws of ``aliasing(...)`` made with a caller's ``draw``: cases() calls
    this inside its own composite rather than building a strategy per example."""
    out = list(args)
    for j in range(1, len(out)):
        if groups[j] is None or not kinds or not draw(COIN):
            continue
        owners = [i for i in range(j) if groups[i] == groups[j] and out[i].alias is None]
        if not owners:
            continue
        i = draw(_choice(tuple(owners)))
        usable = [k for k in kinds if k != "same" or out[i].shape == out[j].shape]
        if not usable:
            continue
        kind = draw(_choice(tuple(usable)))
        if kind == "same":
            out[j] = replace(out[j], alias=Alias(i, "same"), layout=None, grad=out[i].grad)
            continue
        lo, hi = _span(out[i])
        if kind == "overlap":
            offset = draw(integers(lo, max(lo, hi - 1)))
        else:
            offset = out[i].strided.storage_size + draw(integers(0, 2))
        perm = tuple(range(len(out[j].shape)))
        if len(perm) >= 2 and draw(COIN):
            perm = tuple(draw(_permutations(perm)))
        view = strided(out[j].shape, perm=perm, offset=offset)
        out[j] = replace(out[j], alias=Alias(i, "view"), layout=view, grad="view")
        owner_lay = out[i].strided
        out[i] = replace(
            out[i],
            grad="view",
            layout=Layout(max(owner_lay.storage_size, view.storage_size), owner_lay.strides, owner_lay.offset),
        )
    if views:
        for j, a in enumerate(out):
            if groups[j] is not None and a.alias is None and a.grad == "leaf" and draw(COIN):
                out[j] = replace(a, grad="view")
    if require and not any(a.alias or a.grad == "view" for a in out):
        eligible = [j for j, g in enumerate(groups) if g is not None]
        if eligible:
            j = draw(_choice(tuple(eligible)))
            out[j] = replace(out[j], grad="view")
    return tuple(out)


# Built once: Hypothesis validates every fresh strategy object, on each draw.


@functools.lru_cache(maxsize=1024)
def _choice(options: tuple[Any, ...]) -> SearchStrategy[Any]:
    return st.sampled_from(options)


@functools.lru_cache(maxsize=256)
def _permutations(items: tuple[int, ...]) -> SearchStrategy[list[int]]:
    return eager(st.permutations(items))
