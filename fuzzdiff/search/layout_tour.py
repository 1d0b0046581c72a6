"""A pair's first examples meet every layout class that applies, one case each.

Drawn at random, a layout class a bug hinges on can be missed for a whole
campaign: a pair gets a handful of examples, and stride 0 along the one dim
a reduction reads is one layout among many. So the first batch of a pair
(fuzzdiff.campaign.loop) draws each example as a tour: one case per class,
each with its class forced on (strategies.layouts.LAYOUT_CLASSES, and
aliased arguments) and everything else drawn as always. The cases are a
fixed-length tuple, so shrinking keeps each in its class. The classes come in
the order given: a campaign puts first those that met root causes before
(``tour_order``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from hypothesis import strategies as st

from fuzzdiff.case.case import Case
from fuzzdiff.case.features import case_features
from fuzzdiff.checks import Check
from fuzzdiff.search.runner import case_strategy, check_case_plan
from fuzzdiff.targets.target import Target
from strategies.layouts import LAYOUT_CLASSES, layout_class_applies

__all__ = ["TOUR", "FEATURE", "COMPILING_TOUR", "first_tour", "tour_classes", "tour_strategy", "tour_order"]

ALIASED = "aliased"
SIDE = 2  # a tour's least side: a layout on a dim of size 1 is no layout
TOUR = (*LAYOUT_CLASSES, ALIASED)
# cases of a compiling check's first tour: each pays a compile (seconds, where an
# eager check's case costs milliseconds), so a compiling pair's first batch meets
# one class, and a family's pairs take the classes in turn (first_tour)
COMPILING_TOUR = 1
# The case feature (fuzzdiff.case.features) that says a case met each class
FEATURE = {
    "contiguous": "contiguous",
    "permuted": "permuted",
    "sliced": "sliced",
    "offset": "offset",
    "stride0:first": "stride0:first",
    "stride0:last": "stride0:last",
    "channels_last": "channels_last",
}
# the features of an aliased argument: sharing another's memory, or a view of its own storage
ALIAS_FEATURES = ("alias:same", "alias:view", "nonleaf-view")


def met(features: Iterable[str]) -> set[str]:
    """The tour's classes that cases with these features met."""
    found = set(features)
    return {c for c, f in FEATURE.items() if f in found} | ({ALIASED} if found & set(ALIAS_FEATURES) else set())


def tour_classes(check: Check, target: Target, case_options: dict, order: Sequence[str] = TOUR) -> tuple[str, ...]:
    """The classes of ``order`` that can change a case of ``target`` under
    ``check`` (a vector is never permuted, a target that writes its inputs
    never gets stride 0, a check that never aliases never tours aliasing)."""
    plan = check_case_plan(check, target, **case_options)
    ranks = [None if any(d.variadic for d in a.dims) else len(a.dims) for a in target.args]
    out = []
    for name in order:
        if name == ALIASED:
            if plan.alias:
                out.append(name)
        elif layout_class_applies(name, ranks, plan.layout_features):
            out.append(name)
    return tuple(out)


def first_tour(
    order: Sequence[str], compiles: bool, turn: int, cases: int | None = None
) -> tuple[tuple[str, ...], int | None]:
    """The classes of a pair's first batch, in order, and how many of those
    that apply it meets (None: all). A compiling pair meets COMPILING_TOUR of
    them, another ``cases`` where round 1's pace narrows it (None: all),
    starting at its ``turn`` (its place in the campaign): together the pairs
    of a check meet every class about equally often, where each would
    otherwise meet the first."""
    if compiles:
        cases = COMPILING_TOUR
    if cases is None or not order or cases >= len(order):
        return tuple(order), None
    k = turn % len(order)
    return (*order[k:], *order[:k]), cases


def tour_strategy(
    check: Check, target: Target, case_options: dict, classes: Sequence[str], beyond_simplest: bool = True
) -> st.SearchStrategy[list[Case]]:
    """One example: a case of each class, in order; where ``beyond_simplest``,
    never Hypothesis's simplest.

    A campaign tours a pair once, and Hypothesis's first example is its
    simplest choice sequence: every choice the tour leaves to chance (values,
    dims, a vmap's composition, the batched arguments) would be the first
    option, the same in every pair and every campaign. A leading coin that
    must come up heads makes that example invalid (the filter's retries are
    simplest too), so the tour is the first random example; shrinking still
    moves everything else toward the simplest. A target whose random draws
    seldom fit (an index whose dims must fit another argument's) may have
    only the simplest tour to give (fuzzdiff.search.fuzzing falls back to it)."""

    def one(name: str) -> st.SearchStrategy[Case]:
        forced = {"require_alias": True} if name == ALIASED else {"layout_class": name, "min_side": SIDE}
        return case_strategy(check, target, **{**case_options, **forced})

    tour = st.tuples(*(one(c) for c in classes))
    if not beyond_simplest:
        return tour.map(list)
    return (
        st.tuples(st.booleans(), tour)
        .filter(lambda coin_cases: coin_cases[0])
        .map(lambda coin_cases: list(coin_cases[1]))
    )


def tour_order(cases: Iterable[Case], order: Sequence[str] = TOUR) -> tuple[str, ...]:
    """``order`` with the classes that ``cases`` (a corpus's failing cases)
    met most often first, after "contiguous", the plain case; ties keep ``order``."""
    counts: Counter[str] = Counter()
    for case in cases:
        counts.update(met(case_features(case)) - {"contiguous"})
    return tuple(sorted(order, key=lambda c: (c != "contiguous", -counts[c], order.index(c))))
