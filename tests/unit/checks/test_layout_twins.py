"""Every layout materializes exactly the values of its contiguous twin.

A layout changes where elements live, never what they are: a case with a
layout and the same case with ``layout=None`` give equal tensors (bitwise,
nan included), also for stride-0 layouts, whose values repeat along the
expanded dims.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from tests.unit.fdhelpers import MATRIX, UNARY, UNARY4, bitwise_equal, nan_equal, offsets, target
from hypothesis import given
from hypothesis import strategies as st

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.case.layout import Layout
from strategies import cases, layouts, shapes, values

SPECIAL = target("x: a b", torch.exp, "unit_exp_specials",
                 specials=("inf", "-inf", "nan", "-0", "subnormal", "huge"))


def twin(case: Case) -> Case:
    """The same case with every argument contiguous (layout=None)."""
    return replace(case, args=tuple(replace(a, layout=None) for a in case.args))


def assert_same_values(case: Case) -> None:
    plain = twin(case)
    for dtype in (None, torch.complex128 if case.torch_dtype.is_complex else torch.float64):
        got = case.materialize(requires_grad=False, cast=dtype).args
        want = plain.materialize(requires_grad=False, cast=dtype).args
        for g, w in zip(got, want):
            assert w.is_contiguous()
            assert nan_equal(g, w), (case, g, w)
            assert bitwise_equal(g, w), (case, g, w)


def expanded_dims(lay: Layout, shape) -> tuple[int, ...]:
    return tuple(d for d, (n, s) in enumerate(zip(shape, lay.strides)) if s == 0)


@st.composite
def any_layout_cases(draw):
    """One argument: drawn shape, values, dtype and a layout with every feature;
    values declared constant along the dims the layout expands."""
    shape = draw(shapes(max_rank=4, max_side=4))
    lay = draw(layouts(shape))
    vals = draw(values(specials=("inf", "nan", "-0", "huge", "tiny")))
    vals = replace(vals, constant=expanded_dims(lay, shape))
    dtype = draw(st.sampled_from(("float64", "float32", "complex128")))
    return Case("unit", (Arg(shape, vals, lay),), dtype=dtype)


@given(any_layout_cases())
def test_layout_materializes_the_contiguous_twin(case):
    assert_same_values(case)


@given(any_layout_cases())
def test_materialized_tensor_has_the_recipes_strides_and_offset(case):
    (arg,) = case.args
    (t,) = case.materialize(requires_grad=False).args
    assert t.shape == torch.Size(arg.shape)
    assert t.numel() == 0 or (t.stride() == arg.layout.strides
                              and t.storage_offset() == arg.layout.offset)
    assert t.untyped_storage().nbytes() >= arg.layout.storage_size * t.element_size()


@given(any_layout_cases())
def test_stride_zero_values_are_constant_along_expanded_dims(case):
    (arg,) = case.args
    (t,) = case.materialize(requires_grad=False).args
    (c,) = twin(case).materialize(requires_grad=False).args
    for d in expanded_dims(arg.layout, arg.shape):
        if arg.shape[d] > 1 and t.numel() > 0:
            # the twin holds one value per position along d, repeated
            assert nan_equal(c, c.narrow(d, 0, 1).expand_as(c).contiguous())
            assert len(offsets(t)) < t.numel()


def test_expanded_without_constant_values_is_rejected():
    # a stride-0 layout cannot show values that vary along that dim: say so, never fake it
    import pytest

    from fuzzdiff.case.layout import CaseError
    case = Case("unit", (Arg((3, 2), layout=Layout(2, (0, 1), 0)),))
    with pytest.raises(CaseError, match="stride 0"):
        case.materialize()


@given(st.sampled_from([UNARY, MATRIX, UNARY4, SPECIAL]).flatmap(lambda t: cases(t, alias=False)))
def test_cases_layouts_materialize_their_contiguous_twin(case):
    assert_same_values(case)


def test_cases_reach_a_stride_zero_layout_that_equals_its_twin():
    from tests.unit.fdhelpers import reach

    def expanded(c):
        t = c.materialize().args[0]
        return any(s == 0 and n > 1 for n, s in zip(t.shape, t.stride()))

    case = reach(cases(MATRIX, alias=False), expanded)
    assert_same_values(case)


def _twins(amplify: float):
    """Two ways of one computation that differ by 1e-3, and how sharply their
    results move with the values: the sine of ``amplify`` times their sum."""
    from fuzzdiff.case.values import Values

    def first(c, cast=None):
        x = c.materialize(requires_grad=False, cast=torch.float64).args[0]
        return ["output 0"], [torch.sin(amplify * x.sum()).reshape(1)]

    def second(c, cast=None):
        names, (out,) = first(c, cast)
        return names, [out + 1e-3]

    case = Case("sin", (Arg((3,), Values(seed=4, low=-2.0, high=2.0)),), "float64")
    return first, second, case


def test_a_twins_mismatch_where_rounding_moves_the_results_as_far_is_inconclusive():
    from fuzzdiff.checks.twins import judge_twins
    from fuzzdiff.targets import get_target

    first, second, case = _twins(1e15)  # a rounding-sized move of the values turns the sine around
    verdict = judge_twins("two ways", get_target("sin"), case, first, second, check="layout")
    assert verdict.kind == "inconclusive" and "ill-conditioned" in verdict.message, verdict
    first, second, case = _twins(1.0)  # well conditioned: the 1e-3 is a real difference
    verdict = judge_twins("two ways", get_target("sin"), case, first, second, check="layout")
    assert verdict.kind == "fail", verdict


def _exp_difference(a, b):
    """exp(a) - exp(b), exp computed once when b is a itself (the same view)."""
    ea = torch.exp(a)
    return ea - (ea if b is a or (b.data_ptr(), b.stride()) == (a.data_ptr(), a.stride()) else torch.exp(b))


def test_large_terms_that_cancel_in_one_way_only_are_no_alias_failure():
    """At 112 (exp is 4e48) the clones' gradient e g - e g cancels to rounding
    noise of 1e32 where the aliased run's single exp gets g - g = 0 exactly:
    rounding every intermediate result moves the clones' result as far."""
    from fuzzdiff.record.format import case_from_json
    from fuzzdiff.search.runner import run_check
    from fuzzdiff.targets.target import Target

    probe = {"layout": "contiguous", "seed": 2302143302, "zeros": 0.0}
    case = case_from_json({
        "target": "exp_difference", "dtype": "float64", "device": "cpu", "kwargs": {},
        "args": [
            {"shape": [2], "grad": "view", "layout": {"offset": 0, "storage_size": 1, "strides": [0]},
             "values": {"seed": 2302143302, "grid": 0.25, "constant": [0], "structure": [["large", 1]]}},
            {"shape": [2], "alias": {"kind": "same", "of": 0}, "values": {"seed": 2302143302}},
        ],
        "params": {"cotangent": probe},
    })
    a, b = case.materialize().args
    assert a.data_ptr() == b.data_ptr() and (a == 112).all()
    verdict = run_check("alias", Target("exp_difference", _exp_difference, "a: n, b: n"), case)
    assert verdict.kind == "inconclusive" and "ill-conditioned" in verdict.message, verdict
