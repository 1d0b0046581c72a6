"""Strategies validate their arguments: InvalidArgument that names the bad one.

Each call is made and then validated, so a strategy that only failed lazily
(at the first draw) would also be caught.
"""

from __future__ import annotations

import inspect
import typing

import pytest
import torch
from hypothesis.errors import InvalidArgument

from fuzzdiff.case.case import Arg
from strategies import (aliasing, broadcastable_shapes, cases, dtypes, layouts, sampling_interval,
                        shapes, spec_shapes, strided, values)
from strategies.cases import case_plan
from strategies.values import values_plan


def _build(make):
    make().validate()


@pytest.mark.parametrize("make,names", [
    (lambda: shapes(min_rank=3, max_rank=1), ["min_rank", "max_rank"]),
    (lambda: shapes(min_side=5, max_side=2), ["min_side", "max_side"]),
    (lambda: shapes(min_rank=-1), ["min_rank"]),
    (lambda: shapes(max_side=2.5), ["max_side"]),
    (lambda: shapes(min_rank=True), ["min_rank"]),
    (lambda: broadcastable_shapes([2, 3]), ["shape"]),
    (lambda: broadcastable_shapes((2, 3), min_rank=3, max_rank=2), ["min_rank"]),
    (lambda: spec_shapes("x: n", min_side=3, max_side=1), ["min_side"]),
    (lambda: spec_shapes("x: n", max_variadic=-1), ["max_variadic"]),
    (lambda: spec_shapes("x: n m$"), ["spec", "m$"]),
    (lambda: values(low=2, high=1), ["low", "high"]),
    (lambda: values(low=float("nan")), ["low"]),
    (lambda: values(high=float("inf")), ["high"]),
    (lambda: values(kind="complex"), ["kind"]),
    (lambda: values(margin=-0.1, avoid=(0.0,)), ["margin"]),
    (lambda: values(specials=["bogus"]), ["bogus"]),
    (lambda: layouts((2, 3), features=["nope"]), ["features", "nope"]),
    (lambda: layouts((2, 3), max_step=0), ["max_step"]),
    (lambda: layouts((2, 3), max_offset=-1), ["max_offset"]),
    (lambda: dtypes([]), ["allowed"]),
    (lambda: dtypes([torch.int64]), ["int64"]),
    (lambda: aliasing([Arg((2,)), Arg((2,))], [0]), ["groups"]),
    (lambda: aliasing([Arg((2,)), Arg((2,))], [0, 0], kinds=["same", "twice"]), ["twice"]),
    (lambda: cases("exp"), ["target"]),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_arguments_raise_invalid_argument_naming_them(make, names):
    with pytest.raises(InvalidArgument) as info:
        _build(make)
    message = str(info.value)
    for name in names:
        assert name in message, (name, message)


def test_cases_rejects_dtypes_the_target_does_not_support():
    from tests.unit.fdhelpers import UNARY
    with pytest.raises(InvalidArgument, match="supports"):
        cases(UNARY, dtypes=(torch.complex128,)).validate()


@pytest.mark.parametrize("kwargs,name", [
    (dict(perm=(0, 0)), "perm"),
    (dict(steps=(1,)), "steps"),
    (dict(steps=(1, 0)), "steps"),
    (dict(offset=-1), "offset"),
    (dict(expand=(2,)), "expand"),
    (dict(tail=-3), "tail"),
])
def test_strided_recipe_validates(kwargs, name):
    with pytest.raises(InvalidArgument, match=name):
        strided((2, 3), **kwargs)


def test_sampling_interval_rejects_empty_domain():
    with pytest.raises(InvalidArgument, match="domain"):
        sampling_interval((1.0, 1.0))


@pytest.mark.parametrize("domain", [(None, None), (0.0, None), (None, 1.0), (-1.0, 1.0), (0.0, 1e-3)])
def test_sampling_interval_lies_strictly_inside_the_domain(domain):
    lo, hi = sampling_interval(domain)
    assert lo < hi
    if domain[0] is not None:
        assert lo > domain[0]
    if domain[1] is not None:
        assert hi < domain[1]


def test_good_arguments_are_accepted():
    # the same calls with valid arguments build and validate without complaint
    for s in (shapes(min_rank=1, max_rank=3), values(low=1, high=2), layouts((2, 3)),
              spec_shapes("x: n"), dtypes([torch.float32]),
              aliasing([Arg((2,)), Arg((2,))], [0, 0])):
        s.validate()


@pytest.mark.parametrize("strategy,plan", [(values, values_plan), (cases, case_plan)], ids=["values", "cases"])
def test_a_strategy_declares_its_arguments_once_on_its_plan(strategy, plan):
    """values() and cases() take exactly their plan's arguments (composites
    draw from the plan): help() shows them, typing resolves them, and a call
    that does not fit is a TypeError that names the strategy, not its plan."""
    shown, declared = inspect.signature(strategy), inspect.signature(plan)
    assert shown.parameters == declared.parameters
    assert "SearchStrategy" in str(shown.return_annotation)
    hints = typing.get_type_hints(strategy)
    assert hints.keys() == {*declared.parameters, "return"}
    from tests.unit.fdhelpers import UNARY
    given = (UNARY,) if "target" in declared.parameters else ()
    with pytest.raises(TypeError, match=rf"^{strategy.__name__}\(\): .*'bogus'"):
        strategy(*given, bogus=1)
    strategy(*given).validate()
