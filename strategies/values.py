"""Values: a seed, an interval, a few special positions and structures per tensor.

Drawing one Hypothesis value per element is ~10x slower than a random stream
and shrinks poorly; instead a tensor's values are ``Values(seed, ...)`` sampled
from fuzzdiff.case.draws' counter-based stream. Shrinking still goes somewhere simple: toward seed 0, a coarse grid
(values like 0.25 or -1.5), no specials and no structure.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import DrawFn

from fuzzdiff.case.structures import STRUCTURES
from fuzzdiff.case.values import FINITE_SPECIALS, SPECIALS, Values
from strategies._drawing import eager, integers, planned

__all__ = ["values", "values_plan", "draw_values", "ValuesPlan", "sampling_interval", "GRIDS"]

GRIDS = (0.25, None)
_SPAN = 3.0


def sampling_interval(domain: tuple[float | None, float | None] = (None, None)) -> tuple[float, float]:
    """A finite interval strictly inside an (open-ended) domain.

    Ends keep a margin away from a finite domain edge, where derivatives of ops
    such as log, sqrt or acos blow up and finite differences stop being exact.
    """
    lo, hi = domain
    if lo is not None and hi is not None:
        if not lo < hi:
            raise InvalidArgument(f"domain={domain!r} must have low < high")
        margin = min(0.1 * (hi - lo), 0.5)
        return float(lo + margin), float(hi - margin)
    if lo is not None:
        return float(lo + 0.1), float(lo + _SPAN)
    if hi is not None:
        return float(hi - _SPAN), float(hi - 0.1)
    return -2.0, 2.0


def values_plan(
    *,
    low: float = -2.0,
    high: float = 2.0,
    specials: bool | Sequence[str] = False,
    avoid: Sequence[float] = (),
    margin: float = 0.05,
    distinct: bool = False,
    max_specials: int = 3,
    kind: str = "float",
    structures: Sequence[str] = (),
) -> ValuesPlan:
    """The arguments of ``values(...)``, declared once here: validated and
    resolved into the ``ValuesPlan`` that ``draw_values`` draws from."""
    if not (
        isinstance(low, (int, float))
        and isinstance(high, (int, float))
        and math.isfinite(low)
        and math.isfinite(high)
        and low <= high
    ):
        raise InvalidArgument(f"need finite low <= high, got low={low!r}, high={high!r}")
    if kind not in ("float", "int", "bool"):
        raise InvalidArgument(f"kind={kind!r} must be 'float', 'int' or 'bool'")
    names = FINITE_SPECIALS if specials is True else tuple(specials or ())
    bad = set(names) - set(SPECIALS)
    if bad:
        raise InvalidArgument(f"unknown special values {sorted(bad)}; expected a subset of {SPECIALS}")
    if margin < 0:
        raise InvalidArgument(f"margin={margin!r} must be non-negative")
    if isinstance(structures, str) or not all(s in STRUCTURES for s in structures):
        raise InvalidArgument(f"structures={structures!r} must be a sequence of names from {STRUCTURES}")
    if structures and kind != "float":
        raise InvalidArgument(f"structures={tuple(structures)!r} apply to kind='float' values, not kind={kind!r}")
    return _plan(
        float(low),
        float(high),
        names,
        tuple(map(float, avoid)),
        float(margin),
        bool(distinct),
        max_specials,
        kind,
        tuple(structures),
    )


@planned(values_plan)
def values(plan: ValuesPlan) -> st.SearchStrategy[Values]:
    """Values in ``[low, high]``; with ``specials``, a few positions hold special values.

    ``specials=True`` means the finite ones (±0, tiny, subnormal, huge); pass names
    (e.g. ``("inf", "nan")``) for non-finite ones, which derivative checks cannot judge.
    ``structures`` (names from ``fuzzdiff.case.structures.STRUCTURES``) may put the values
    at a structured point: ties, exact zeros, identity or diagonal matrices,
    repeated singular values, large values (fuzzdiff.case.structures).
    Shrinks toward seed 0, the coarse grid, no specials and no structure.
    The keyword arguments are ``values_plan``'s.
    """
    return _strategy(plan)


@functools.lru_cache(maxsize=512)
def _strategy(plan: ValuesPlan) -> st.SearchStrategy[Values]:
    # Cached: cases() asks for the same few value strategies on every draw, and a
    # fresh strategy object is validated again by Hypothesis each time (slow).
    return _draw_values(plan)


@dataclass(frozen=True)
class ValuesPlan:
    """What ``draw_values`` needs, resolved once per strategy rather than once
    per example: the strategies it draws from and the fields it fixes."""

    grids: st.SearchStrategy[float | None] | None
    special_lists: st.SearchStrategy[tuple[tuple[int, str], ...]] | None
    structure_lists: st.SearchStrategy[tuple[tuple[str, int], ...]] | None
    fixed: tuple[tuple[str, Any], ...]  # Values' field name -> value


@functools.lru_cache(maxsize=512)
def _plan(
    low: float,
    high: float,
    names: tuple[str, ...],
    avoid: tuple[float, ...],
    margin: float,
    distinct: bool,
    max_specials: int,
    kind: str,
    structures: tuple[str, ...],
) -> ValuesPlan:
    grids = None if distinct or kind != "float" else _GRID_CHOICE
    special_lists = (
        eager(st.lists(st.tuples(st.integers(0, 1 << 16), st.sampled_from(names)), max_size=max_specials).map(tuple))
        if names
        else None
    )
    structure_lists = _structure_draws(structures) if structures else None
    fixed = dict(low=low, high=high, avoid=avoid, margin=margin if avoid else 0.0, distinct=distinct, kind=kind)
    defaults = Values()
    # Only what differs from Values' defaults: the repr of a drawn Values stays short.
    return ValuesPlan(
        grids, special_lists, structure_lists, tuple((k, v) for k, v in fixed.items() if v != getattr(defaults, k))
    )


# Percent of the draws of 0 to 99 that put an argument at each structured
# point. The points of one group exclude each other (a matrix is not both the
# identity and of repeated singular values; values are scaled one way), and
# groups are drawn each on its own. Among Hypothesis's examples (which include
# its simplest, every draw 0) about half as many land there: any point at all
# in about a third of an argument's draws, those where bugs are most often
# reported most often.
STRUCTURE_PERCENT: dict[tuple[str, ...], tuple[int, ...]] = {
    ("zeros",): (20,),
    ("ties",): (14,),
    ("identity", "diagonal", "repeated_singular"): (20, 6, 6),
    ("large", "overflow", "offset"): (10, 12, 6),
    # last: the whole argument at one value overwrites the points above
    ("all_zero", "all_equal"): (10, 6),
}
_WHERE = integers(0, 1 << 16)


@functools.lru_cache(maxsize=64)
def _structure_draws(names: tuple[str, ...]) -> st.SearchStrategy[tuple[tuple[str, int], ...]]:
    """The structured points of ``names``, a group at a time: a draw of 0 to
    99 picks a point of the group from ``100 - its percent`` on (the first
    point of a group the highest draws), so each group shrinks toward none;
    then where or how much (``k``)."""
    groups = []
    for group, percents in STRUCTURE_PERCENT.items():
        ladder, high = [], 100
        for name, percent in zip(group, percents):
            if name in names:
                ladder.append((high - percent, high, name))
            high -= percent
        if ladder:
            groups.append(ladder)

    @st.composite
    def structures(draw: DrawFn) -> tuple[tuple[str, int], ...]:
        out = []
        for ladder in groups:
            k = draw(_PERCENT)
            name = next((name for low, high, name in ladder if low <= k < high), None)
            if name is not None:
                out.append((name, draw(_WHERE)))
        return tuple(out)

    return eager(structures())


_PERCENT = integers(0, 99)
_SEEDS = integers(0, 2**32 - 1)
_GRID_CHOICE = st.sampled_from(GRIDS)


def draw_values(draw: DrawFn, plan: ValuesPlan) -> Values:
    """The draws of ``values(...)`` made with a caller's ``draw``: a seed, a
    grid (shrinks toward 0.25), specials and structures (shrink toward none);
    the fixed fields cost no draw at all."""
    seed = draw(_SEEDS)
    grid = draw(plan.grids) if plan.grids is not None else None
    specials = draw(plan.special_lists) if plan.special_lists is not None else ()
    if plan.structure_lists is None:
        return Values(seed=seed, grid=grid, specials=specials, **dict(plan.fixed))
    structure = draw(plan.structure_lists)
    return Values(seed=seed, grid=grid, specials=specials, structure=structure, **dict(plan.fixed))


@st.composite
def _draw_values(draw: DrawFn, plan: ValuesPlan) -> Values:
    return draw_values(draw, plan)
