"""Structured points: drawn, stored and replayed as data, shrunk away, and
confirmed so that a kink (a tie of max) is never a failure while a wrong
formula at a smooth structured point (a zero of cumprod) is."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hypothesis import find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument, NoSuchExample

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.case.features import arg_features
from fuzzdiff.search.fuzzing import fuzz
from fuzzdiff.targets.known import matching
from fuzzdiff.case.layout import CaseError, Layout
from fuzzdiff.record.format import case_from_json
from fuzzdiff.search.runner import run_check
from fuzzdiff.script import standalone_script
from fuzzdiff.case.structures import STRUCTURES
from fuzzdiff.targets import get_target
from fuzzdiff.targets.catalog.reductions import CUMPROD_JVP_AT_ZERO
from fuzzdiff.targets.target import Target
from fuzzdiff.case.values import Values
from fuzzdiff.config import FuzzConfig
from strategies import cases, values
from tests.selftest.zoo import by_name

CUMPROD = by_name("cumprod_quotient_grad")
CUMPROD_CASE = Case(CUMPROD.bug.ref, (Arg((2, 4), Values(seed=3, structure=(("zeros", 5),))),))


def _logical(v: Values, shape, dtype=torch.float64) -> torch.Tensor:
    return Case("t", (Arg(tuple(shape), v),), str(dtype).removeprefix("torch.")).materialize(requires_grad=False).args[0]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(0, 1 << 16))
@settings(max_examples=20, deadline=None)
def test_each_structure_is_there(dtype, seed, k):
    shape = (2, 3, 3)
    x = _logical(Values(seed=seed, structure=(("zeros", k),)), shape, dtype)
    assert (x.reshape(-1)[k % x.numel()] == 0).item()
    x = _logical(Values(seed=seed, structure=(("ties", k),)), shape, dtype)
    assert x.unique().numel() <= 2 + k % 3
    x = _logical(Values(seed=seed, structure=(("identity", k),)), shape, dtype)
    assert torch.equal(x, torch.eye(3, dtype=dtype).expand(shape))
    x = _logical(Values(seed=seed, structure=(("diagonal", k),)), shape, dtype)
    assert torch.equal(x, torch.diag_embed(torch.diagonal(x, dim1=-2, dim2=-1)))
    assert (torch.diagonal(x, dim1=-2, dim2=-1) != 0).all()
    x = _logical(Values(seed=seed, structure=(("repeated_singular", k),)), shape, torch.float64)
    s = torch.linalg.svdvals(x)
    r = 2 + k % 2
    torch.testing.assert_close(s[:, :r], s[:, :1].expand(2, r), rtol=1e-12, atol=0)
    plain = _logical(Values(seed=seed), shape, dtype)
    assert plain.abs().max() <= 2
    assert _logical(Values(seed=seed, structure=(("large", k),)), shape, dtype).abs().max() >= 32 * plain.abs().max()
    shifted = _logical(Values(seed=seed, structure=(("offset", k),)), shape, dtype)
    assert shifted.abs().min() >= 250
    # the whole argument at one value, whatever the structures before it did
    assert not _logical(Values(seed=seed, structure=(("zeros", k), ("large", k), ("all_zero", k))), shape, dtype).any()
    assert _logical(Values(seed=seed, structure=(("identity", k), ("all_equal", k))), shape, dtype).unique().numel() == 1
    equal = _logical(Values(seed=seed, structure=(("all_equal", k),)), shape, dtype)
    assert torch.equal(equal, plain.reshape(-1)[k % plain.numel()].expand(shape))


@pytest.mark.parametrize("pin", [False, True])
@pytest.mark.parametrize("name", ["all_zero", "all_equal"])
def test_the_neighbours_of_a_whole_argument_point_keep_it(pin, name):
    """The identity rotation's neighbours of the same structure are the identity
    rotation: a nan there is confirmed at the point, not moved off it."""
    case = Case("t", (Arg((2, 3), Values(seed=4, structure=(("zeros", 1), (name, 2)))),))
    case = _pinned(case) if pin else case
    x = case.materialize().args[0]
    near = case.nudged(1e-3, seed=1).materialize().args[0]
    assert near.unique().numel() == 1 and (near - x).abs().max() < 0.01
    assert torch.equal(near, x) if name == "all_zero" else not torch.equal(near, x)
    off = case.nudged(1e-3, seed=1, keep_structure=False).materialize().args[0]
    assert off.unique().numel() == 6


def test_structures_shrink_away():
    v = find(values(structures=STRUCTURES), lambda v: True)
    assert v.structure == ()
    v = find(values(structures=("zeros", "ties")), lambda v: len(v.structure) >= 1)
    # one structure at its plainest k (each is drawn on its own: the first drawn shrinks to none)
    assert len(v.structure) == 1 and v.structure[0][1] == 0, v.structure


def test_validation():
    with pytest.raises(InvalidArgument, match="structures"):
        values(structures=("zeroes",)).example()
    with pytest.raises(InvalidArgument, match="structures"):
        values(structures="zeros").example()
    with pytest.raises(InvalidArgument, match="structures"):
        values(structures=("zeros",), kind="int").example()
    with pytest.raises(ValueError, match="structured"):
        Target("t", torch.sin, "x: n", structured=("zeroes",))
    with pytest.raises(CaseError, match=r"args\[0\]\.values\.structure\[0\]"):
        case_from_json({"target": "sin", "args": [{"shape": [2], "values": {"structure": [["zeroes", 1]]}}]})
    with pytest.raises(CaseError, match=r"structure\[0\]"):
        case_from_json({"target": "sin", "args": [{"shape": [2], "values": {"structure": [["zeros", -1]]}}]})


def test_structure_is_stored_and_old_records_load():
    case = Case("cumprod", (Arg((2, 3), Values(seed=4, structure=(("zeros", 4),))),))
    again = case_from_json(json.loads(json.dumps(case.to_json())))
    assert again == case
    assert torch.equal(again.materialize().args[0], case.materialize().args[0])
    old = case.to_json()
    for key in ("structure", "nudge_off"):
        del old["args"][0]["values"][key]
    assert case_from_json(old).args[0].values.structure == ()
    assert "structure:zeros" in arg_features(case.args[0])  # what a Known signature can name


def _pinned(case: Case) -> Case:
    return replace(case, data=case.storages())


@pytest.mark.parametrize("pin", [False, True])
def test_nudged_keeps_the_structure_unless_asked(pin):
    case = Case("cumprod", (Arg((2, 3), Values(seed=4, structure=(("zeros", 4),))),))
    case = _pinned(case) if pin else case
    x = case.materialize().args[0]
    near = case.nudged(1e-3, seed=1).materialize().args[0]
    assert near.reshape(-1)[4] == 0 and not torch.equal(near, x)
    assert (near - x).abs().max() < 0.01
    off = case.nudged(1e-3, seed=1, keep_structure=False).materialize().args[0]
    assert off.reshape(-1)[4] != 0 and (off - x).abs().max() < 0.01


def test_a_wrong_formula_at_a_smooth_structured_point_fails():
    """cumprod is smooth at an exact zero: the quotient backward's nan there is
    confirmed (a neighbour off the zero would have hidden it)."""
    case = CUMPROD_CASE
    verdict = run_check("grad", CUMPROD.bug, case)
    assert verdict.kind == "fail", verdict
    assert "no kink along u" in verdict.message
    assert run_check("grad", CUMPROD.twin, case).kind == "pass"
    assert run_check("grad", CUMPROD.bug, replace(case, args=(Arg((2, 4), Values(seed=3)),))).kind == "pass"


@pytest.mark.parametrize("name", ["max_dim", "median_dim"])
def test_a_tie_of_max_is_a_kink_not_a_failure(name):
    """max over a dim with ties: autograd's gradient goes to one of the tied
    elements, finite differences see both sides; the kink test says so. The
    median of three tied values has equal one-sided derivatives (an odd
    function of u), but one that is not linear in u."""
    target = get_target(name)
    found = []
    for seed in range(40):
        case = Case(name, (Arg((3, 5), Values(seed=seed, structure=(("ties", 0),))),),
                    kwargs={"dim": 1, "keepdim": False})
        verdict = run_check("grad", target, case)
        assert verdict.kind in ("pass", "inconclusive"), verdict
        found.append(verdict.kind)
        if verdict.kind == "inconclusive":
            assert "kink at the structured point" in verdict.message
    assert "inconclusive" in found  # the ties did reach the maximum


@pytest.mark.parametrize("name", ["max_dim", "amax", "sort", "cumprod", "prod"])
def test_catalog_targets_with_structures_do_not_fail(name):
    target = get_target(name)
    assert target.structured
    tally = fuzz("grad", target, FuzzConfig(variants=2, structures=1),
                 settings=settings(max_examples=30, database=None, deadline=None))  # raises on a failure
    assert tally.counts["fail"] == 0 and tally.counts["pass"] > 0


def test_cases_draw_structures_only_when_opted_in():
    target = get_target("cumprod")
    drawn = find(cases(target), lambda c: any(a.values.structure for a in c.args))
    ((name, k),) = drawn.args[0].values.structure  # one structure, at its plainest k
    assert name in target.structured and k == 0
    with pytest.raises(NoSuchExample):
        find(cases(target, structured=False), lambda c: any(a.values.structure for a in c.args),
             settings=settings(max_examples=50))


def test_the_script_of_a_structured_failure_reproduces_it(tmp_path):
    """The script holds the structured values element by element: torch alone
    shows the nan at the zero (and the twin's script passes)."""
    case = replace(CUMPROD_CASE, params={"cotangent": {"seed": 3}, "direction": {"seed": 4}})
    sources = []
    for target in (CUMPROD.bug, CUMPROD.twin):
        verdict = run_check("grad", target, case)
        path = tmp_path / f"{target.name}.py"
        path.write_text(standalone_script("grad", case, verdict, target=target))
        sources.append(path)
    codes = []
    for path in sources:
        r = subprocess.run([sys.executable, "-I", str(path)], capture_output=True, text=True, timeout=300,
                           cwd=Path(__file__).parents[3])
        codes.append((r.returncode, "MISMATCH" in r.stdout, r.stderr[-2000:]))
    assert codes[0][:2] == (1, True), codes[0]
    assert codes[1][:2] == (0, False), codes[1]


def test_float32_rounding_at_an_offset_is_the_inputs_conditioning():
    """layer_norm of float32 values shifted by 1024: the inputs carry float32
    rounding at 1024, which the dtype check's conditioning estimate must see
    (the nudge scales with the offset), not a wrong float32 gradient."""
    x = Values(seed=0, distinct=True, structure=(("offset", 4),))
    lay = Layout(3, (3, 1))
    case = Case("layer_norm", (Arg((1, 3), x, lay), Arg((1, 3), Values(distinct=True), lay),
                               Arg((1, 3), Values(distinct=True), lay)),
                "float32", kwargs={"eps": 1e-5}, params={"cotangent": {"layout": "contiguous", "seed": 0, "zeros": 0.0}})
    assert case.materialize().args[0].min() > 1000
    verdict = run_check("dtype", get_target("layer_norm"), case)
    assert verdict.kind in ("pass", "inconclusive"), verdict
    near = case.nudged(2.0**-22, seed=5).materialize().args[0]
    assert (near - case.materialize().args[0]).abs().max() > 0  # moved by float32 rounding at 1024


def test_finite_differences_at_large_values_count_their_rounding():
    """log_softmax at values near -2.6e5 (offset, then scaled): x + eps u
    rounds at |x|'s ulp and moves the finite differences by ~3e-5, which the
    reference's error estimate must hold (it is right once shifted to 0)."""
    x = Values(seed=96, grid=0.25, constant=(0,), structure=(("offset", 1), ("large", 89)))
    case = Case("log_softmax", (Arg((2, 3), x, Layout(4, (0, 1)), grad="view"),), kwargs={"dim": 1},
                params={"cotangent": {"layout": "transposed", "seed": 1933602527, "zeros": 0.5},
                        "direction": {"layout": "contiguous", "seed": 3, "zeros": 0.5}})
    assert case.materialize().args[0].abs().min() > 2e5
    verdict = run_check("grad", get_target("log_softmax"), case)
    assert verdict.kind == "pass", verdict


def test_a_kink_still_along_u_is_seen_along_a_dense_direction():
    """The lower median of four values in two levels: where three tie and u
    moves only one of them, the median is flat along u on both sides and
    along every split of u, while forward mode follows the moved one (-1.05).
    The point is a kink all the same, which a dense direction shows."""
    case = case_from_json({
        "target": "median_dim", "dtype": "float64", "device": "cpu", "kwargs": {"dim": -1, "keepdim": False},
        "args": [{"shape": [3, 3, 4], "grad": "leaf", "layout": {"offset": 0, "storage_size": 36, "strides": [12, 4, 1]},
                  "values": {"seed": 132774, "low": -2.0, "high": 2.0, "distinct": True, "structure": [["ties", 0]]}}],
        "params": {"cotangent": {"layout": "contiguous", "seed": 4294967295, "zeros": 0.5},
                   "direction": {"layout": "contiguous", "seed": 4294967295, "zeros": 0.5}},
    })
    verdict = run_check("forward", get_target("median_dim"), case)
    assert verdict.kind == "inconclusive", verdict
    assert "along a dense direction differ" in verdict.message


def _std_at_a_tie_seen_through_zeros() -> Case:
    """std over two tied values (sqrt at 0: the first derivative is singular),
    with a cotangent that is zero on those columns: the second derivative is
    0 * inf = nan there, and the finite differences see 0."""
    one, minus = "0x1.0000000000000p+0", "-0x1.0000000000000p+0"
    return case_from_json({
        "target": "std", "dtype": "float64", "device": "cpu", "kwargs": {"correction": 0, "dim": 0, "keepdim": False},
        "args": [{"shape": [2, 3], "grad": "leaf", "layout": {"offset": 0, "storage_size": 6, "strides": [3, 1]},
                  "storage": {"data": [minus, one, minus, minus, one, one], "dtype": "float64", "numel": 6},
                  "values": {"seed": 110, "low": -2.0, "high": 2.0, "distinct": True, "structure": [["ties", 0]]}}],
        "params": {"cotangent": {"layout": "expanded", "seed": 15816790, "zeros": 0.5},
                   "direction": {"layout": "contiguous", "seed": 0, "zeros": 0.0},
                   "second": {"layout": "contiguous", "seed": 0, "zeros": 0.0}},
    })


def test_second_derivatives_at_a_smooth_zero_are_checked_at_the_zero():
    """cumprod is a polynomial: reverse mode through its jvp is nan at an
    exact zero (a torch bug, known), which a neighbour off the zero would hide."""
    target = get_target("cumprod")
    case = Case("cumprod", (Arg((3,), Values(seed=5, structure=(("zeros", 1),))),), kwargs={"dim": 0})
    assert case.materialize().args[0][1] == 0
    verdict = run_check("forward2", target, case)
    assert verdict.kind == "fail" and "reverse-over-forward" in verdict.message, verdict
    assert "no kink along u or a dense direction" in verdict.message
    assert matching(target.known, "forward2", case, verdict) is CUMPROD_JVP_AT_ZERO


@pytest.mark.parametrize("check, case", [
    ("gradgrad", Case("norm", (Arg((3,), Values(seed=1, structure=(("zeros", 0),))),),
                      kwargs={"dim": None, "keepdim": False, "ord": 1.5})),
    ("forward2", _std_at_a_tie_seen_through_zeros()),
])
def test_second_derivatives_at_a_singular_first_derivative_are_inconclusive(check, case):
    """|x|^1.5 at 0 (its gradient is sqrt-like: infinite slope), and std at a
    tie seen through a zero cotangent (nan reaches every output)."""
    verdict = run_check(check, get_target(case.target), case)
    assert verdict.kind in ("pass", "inconclusive"), verdict
    if verdict.kind == "inconclusive":
        assert "singular point" in verdict.message or "kink" in verdict.message, verdict


def test_a_jump_of_the_outputs_at_a_structured_point_is_not_a_wrong_second_derivative():
    """torch.linalg.qr at a diagonal input (the identity made dominant: 3 I)
    takes LAPACK's tau = 0 branch, Q = I, and any move off it the other,
    Q = diag(-1, 1): the outputs jump at the point. J^T v seen through this v
    is continuous there, so the first derivative has equal one-sided
    differences, while the analytic second derivative is that of the point's
    own branch (record 3493d3b41d482b37): a singular point, not a failure."""
    case = case_from_json({
        "target": "qr", "dtype": "float64", "device": "cpu", "kwargs": {},
        "args": [{"shape": [2, 2], "grad": "leaf", "layout": {"offset": 0, "storage_size": 4, "strides": [2, 1]},
                  "values": {"seed": 0, "low": -2.0, "high": 2.0, "structure": [["identity", 0]]}}],
        "params": {"cotangent": {"layout": "transposed", "seed": 5, "zeros": 0.5},
                   "direction": {"layout": "contiguous", "seed": 0, "zeros": 0.0},
                   "second": {"layout": "contiguous", "seed": 0, "zeros": 0.0}},
    })
    assert torch.equal(case.materialize(requires_grad=False).args[0], torch.eye(2, dtype=torch.float64))
    verdict = run_check("gradgrad", get_target("qr"), case)
    assert verdict.kind == "inconclusive", verdict
    assert "of the outputs along u" in verdict.message
    # forward2 differentiates J^T w along u' ("second"): the same jump, asked the same way
    verdict = run_check("forward2", get_target("qr"), case)
    assert verdict.kind == "inconclusive", verdict
    assert "of the outputs along u'" in verdict.message


def test_two_all_zero_arguments_are_a_tie_between_arguments():
    """dist(0, 0) is dist(x, x): no move that keeps both all zero unties them,
    so second derivatives are asked of neighbours that move each on its own."""
    zero = Values(seed=1, structure=(("all_zero", 0),))
    both = Case("t", (Arg((2, 3), zero), Arg((2, 3), replace(zero, seed=2))))
    assert both.repeated
    assert not Case("t", (Arg((2, 3), zero), Arg((2, 3), Values(seed=2)))).repeated
    x, y = both.nudged(1e-3, seed=1, keep_structure=False).materialize().args
    assert not torch.equal(x, y)


def test_a_function_that_switches_branch_exactly_at_a_diagonal_point_has_no_derivative_there():
    """torch.linalg.qr at a diagonal matrix makes no Householder reflection,
    and at every neighbour one: its outputs jump at the point itself, where
    the check's cotangent (zero at the jumping entries) need not see it."""
    probe = {"layout": "contiguous", "seed": 0, "zeros": 0.0}
    case = case_from_json({
        "target": "qr", "dtype": "float64", "device": "cpu", "kwargs": {},
        "args": [{"shape": [2, 2], "grad": "leaf",
                  "values": {"seed": 0, "low": -0.8, "high": 0.8, "grid": 0.25, "structure": [["diagonal", 0]]}}],
        "params": {"cotangent": {"layout": "transposed", "seed": 155, "zeros": 0.5}, "direction": probe},
    })
    verdict = run_check("forward", get_target("qr"), case)
    assert verdict.kind == "inconclusive" and "a jump" in verdict.message, verdict
