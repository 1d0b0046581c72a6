"""Determinism: a case rebuilds the same bits every time, and after a JSON round trip."""

from __future__ import annotations

import json
import math

import torch
from tests.unit.fdhelpers import PAIR, TRIPLE, UNARY, UNARY4, bitwise_equal, storage_ptr, target
from hypothesis import given
from hypothesis import strategies as st

from dataclasses import replace

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.case.layout import Layout
from fuzzdiff.checks import get_check
from fuzzdiff.record.format import case_from_json
from fuzzdiff.search.runner import case_strategy
from fuzzdiff.case.values import Probe, Values
from strategies import cases, probes

NONFINITE = ("inf", "-inf", "nan", "-0", "subnormal", "-subnormal", "tiny", "huge", "-huge")
SPECIAL_PAIR = target("x: n m, y: n m", torch.add, "unit_add_specials", specials=NONFINITE)
SPECIAL_UNARY = target("x: ...", torch.exp, "unit_exp_nonfinite", specials=NONFINITE,
                       dtypes=(torch.float64, torch.float32, torch.complex128))
TARGETS = [UNARY, UNARY4, PAIR, TRIPLE, SPECIAL_PAIR, SPECIAL_UNARY]

any_case = st.sampled_from(TARGETS).flatmap(cases)
grad_case = st.sampled_from([UNARY, PAIR, SPECIAL_PAIR]).flatmap(
    lambda t: case_strategy(get_check("grad"), t))


def structure(inputs) -> list:
    """Everything about the materialized tensors except their values."""
    args = inputs.args
    return [(tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.is_leaf, t.requires_grad,
             [j for j in range(i) if args[j] is t],
             [j for j in range(len(args)) if storage_ptr(args[j]) == storage_ptr(t)])
            for i, t in enumerate(args)]


def assert_same_materialization(a: Case, b: Case, **kw) -> None:
    x, y = a.materialize(**kw), b.materialize(**kw)
    assert structure(x) == structure(y)
    for s, t in zip(x.args + x.leaves, y.args + y.leaves):
        assert bitwise_equal(s, t), (s, t)
    # the memory around the views too (junk outside a view is part of the case)
    for s, t in zip(x.leaves, y.leaves):
        s_all = s.detach().as_strided((s.untyped_storage().nbytes() // s.element_size(),), (1,), 0)
        t_all = t.detach().as_strided((t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)
        assert bitwise_equal(s_all, t_all)


def round_trip(case: Case) -> Case:
    text = json.dumps(case.to_json(), allow_nan=False)  # strict JSON: no NaN/Infinity tokens
    return case_from_json(json.loads(text))


@given(any_case)
def test_materialize_twice_is_bitwise_equal(case):
    assert_same_materialization(case, case)


@given(any_case)
def test_materialize_with_float64_cast_is_deterministic_and_exact(case):
    if case.torch_dtype.is_complex:
        return
    assert_same_materialization(case, case, cast=torch.float64, requires_grad=False)
    low = case.materialize(requires_grad=False).args
    ref = case.materialize(requires_grad=False, cast=torch.float64).args
    for lo, hi in zip(low, ref):
        if lo.dtype.is_floating_point:
            # the reference holds exactly the low-precision values
            assert bitwise_equal(hi.to(lo.dtype), lo)


@given(any_case)
def test_a_recast_holds_the_float64_reference_values_or_declines(case):
    """The grad check's finite differences start from the checked leaves, cast
    (Case.recast), where every argument is a leaf of its own: the same values
    and dtypes as a float64 materialize()."""
    inputs = case.materialize()
    recast = case.recast(inputs, torch.float64)
    if case.copies or any(a.grad != "leaf" or a.alias is not None for a in case.args):
        return
    assert recast is not None
    ref = case.materialize(requires_grad=False, cast=torch.float64)
    for got, want in zip(recast.args, ref.args):
        assert got.dtype == want.dtype and not got.requires_grad and bitwise_equal(got, want)
    assert recast.rebuild(recast.leaves) == recast.leaves


@given(any_case)
def test_json_round_trip_is_equal_and_materializes_bitwise_equal(case):
    back = round_trip(case)
    assert back == case
    assert back.to_json() == case.to_json()
    assert_same_materialization(case, back)


@given(grad_case)
def test_json_round_trip_keeps_check_params(case):
    back = round_trip(case)
    assert back == case
    assert set(back.params) == {"cotangent", "direction"}
    for key in ("cotangent", "direction"):
        p, q = Probe(**case.params[key]), Probe(**back.params[key])
        out = case.materialize().args[0]
        assert torch.equal(p.like(out), q.like(out))


def test_round_trip_of_non_finite_specials_and_kwargs():
    specials = tuple(enumerate(NONFINITE))
    case = Case("unit", (Arg((3, 4), Values(seed=9, specials=specials)),),
                kwargs={"p": math.inf, "q": -math.inf, "r": math.nan, "s": -0.0, "t": [1.5, math.nan]})
    text = json.dumps(case.to_json(), allow_nan=False)
    back = case_from_json(json.loads(text))
    # nan != nan, so compare the encodings and the decoded floats one by one
    assert json.dumps(back.to_json(), allow_nan=False) == text
    assert back.kwargs["p"] == math.inf and back.kwargs["q"] == -math.inf
    assert math.isnan(back.kwargs["r"]) and math.isnan(back.kwargs["t"][1])
    assert math.copysign(1.0, back.kwargs["s"]) == -1.0
    assert back.args == case.args
    x, y = case.materialize().args[0], back.materialize().args[0]
    assert bitwise_equal(x, y)
    flat = x.detach().reshape(-1)
    assert flat[0] == math.inf and flat[1] == -math.inf and math.isnan(float(flat[2]))
    assert math.copysign(1.0, float(flat[3])) == -1.0 and float(flat[3]) == 0.0


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
def test_different_seeds_give_different_values(s1, s2):
    a = Values(seed=s1).sample((16,), torch.float64)
    b = Values(seed=s2).sample((16,), torch.float64)
    assert torch.equal(a, b) == (s1 == s2)


@given(probes(), st.sampled_from([(3,), (2, 3), (2, 1, 4)]))
def test_probe_round_trip_through_params_json(p, shape):
    t = torch.zeros(shape)
    back = Probe(**json.loads(json.dumps(p.__dict__)))
    assert back == p
    assert bitwise_equal(back.like(t), p.like(t))


def _gapped(shape) -> Layout:
    """Every element two apart, at offset 1: a layout with memory around the view."""
    strides = tuple(2 * s for s in Layout.contiguous(shape).strides)
    size = 2 + sum((n - 1) * s for n, s in zip(shape, strides)) if all(shape) else 1
    return Layout(size, strides, 1 if all(shape) else 0)


@given(any_case, st.booleans())
def test_pinned_values_go_with_their_arguments_into_other_layouts(case, gapped):
    """The layout check's other run of a record (features.relaid) holds the
    record's values, not the seeds' draws: here the pinned values differ from
    what the seeds draw, and each relaid view shows the values it showed."""
    pinned = replace(case, data={i: s * 2 + 1 for i, s in case.storages().items()})
    layouts = [_gapped(a.shape) if gapped else Layout.contiguous(a.shape) for a in case.args]
    relaid = pinned.with_layouts(layouts)
    before = pinned.materialize(requires_grad=False).args
    after = relaid.materialize(requires_grad=False).args
    for a, b in zip(before, after):
        assert a.shape == b.shape and bitwise_equal(a, b)
