"""Shrinking: a failing property ends at a small, plain case.

Shrunk cases are what users read and replay, so every feature that does not
matter to the failure must shrink away: shapes to the fewest elements, layouts
to contiguous (no offset, no tail), values to seed 0 with no specials, no
aliasing, float64, and probes to seed 0, contiguous, without zeros.
"""

from __future__ import annotations

import json

import pytest
import torch
from tests.unit.fdhelpers import PAIR, UNARY, overlap, reach, target
from hypothesis import HealthCheck, settings

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.checks import get_check
from fuzzdiff.search.fuzzing import FuzzFailure, fuzz
from fuzzdiff.case.layout import Layout
from fuzzdiff.search.runner import case_strategy
from fuzzdiff.config import FuzzConfig
from strategies import cases


def plain_layout(a: Arg) -> bool:
    lay = a.layout or Layout.contiguous(a.shape)
    return lay.is_contiguous(a.shape) and lay.offset == 0 and lay.storage_size == Layout.contiguous(a.shape).storage_size


def plain_values(a: Arg) -> bool:
    return a.values.seed == 0 and a.values.specials == () and a.values.nudge == 0


def assert_plain_except(case: Case, *, layout=True, alias=True) -> None:
    assert case.dtype == "float64"
    assert case.kwargs == {}
    for a in case.args:
        assert plain_values(a), a
        if layout:
            assert plain_layout(a), a
        if alias:
            assert a.alias is None and a.grad == "leaf", a
    for p in case.params.values():
        assert p == {"seed": 0, "layout": "contiguous", "zeros": 0.0}, case.params


def test_size_property_shrinks_to_the_fewest_elements_and_a_plain_case():
    case = reach(cases(PAIR), lambda c: c.materialize().args[0].numel() >= 2)
    x, y = case.args
    assert x.shape in ((1, 2), (2, 1))
    assert y.shape == x.shape  # "x: n m, y: n m" shares both sizes
    assert_plain_except(case)


def test_layout_property_shrinks_to_one_small_layout_feature():
    check = get_check("grad")
    case = reach(case_strategy(check, UNARY), lambda c: not c.materialize().args[0].is_contiguous())
    (a,) = case.args
    assert a.shape == (2,)
    t = case.materialize().args[0]
    assert not t.is_contiguous()
    assert t.storage_offset() == 0
    assert_plain_except(case, layout=False)


def test_alias_property_shrinks_to_one_element_views():
    def overlapping(c):
        a, b = c.materialize().args
        return a is not b and overlap(a, b)

    case = reach(cases(PAIR), overlapping)
    x, y = case.args
    assert x.shape == y.shape == (1, 1)
    assert y.alias is not None and y.alias.kind == "view" and y.alias.of == 0
    assert_plain_except(case, layout=False, alias=False)


def test_values_property_shrinks_specials_away():
    # needing a non-finite value keeps exactly one special and nothing else
    spec_target = target("x: n", torch.exp, "unit_exp_inf", specials=("inf", "nan"), min_side=1)
    case = reach(cases(spec_target), lambda c: not bool(torch.isfinite(c.materialize().args[0]).all()))
    (a,) = case.args
    assert a.shape == (1,)
    assert len(a.values.specials) == 1
    assert a.values.seed == 0
    assert plain_layout(a)


class _WrongForLargeInputs(torch.autograd.Function):
    """3x, with a backward that is wrong once the input has 3 or more elements."""

    @staticmethod
    def forward(ctx, x):
        ctx.n = x.numel()
        return x * 3

    @staticmethod
    def backward(ctx, g):
        return g * (3.0 if ctx.n < 3 else 3.5)


def test_cases_seen_failing_are_not_run_again_while_shrinking(monkeypatch):
    """Many of Hypothesis's choice sequences draw the same cases: on a slow
    function each confirmed failure costs seconds, so one seen failing fails
    again without running (the shrunk case is as small as ever, above)."""
    import fuzzdiff.search.fuzzing as fuzzing

    runs: dict[str, int] = {}
    verdict_at = fuzzing.verdict_at

    def counted(check, target_, case):
        verdict = verdict_at(check, target_, case)
        if verdict.failed:
            key = json.dumps(case.to_json(), sort_keys=True)
            runs[key] = runs.get(key, 0) + 1
        return verdict

    monkeypatch.setattr(fuzzing, "verdict_at", counted)
    shrunk = _shrunk_planted_bug("unit_planted_bug_counted")
    assert len(runs) > 1  # it shrank through several failing cases
    assert max(runs.values()) == 1, runs  # and ran each of them once
    assert json.dumps(shrunk.to_json(), sort_keys=True) in runs


def _shrunk_planted_bug(name: str) -> Case:
    """The grad check's shrunk failure of _WrongForLargeInputs."""
    buggy = target("x: ...", _WrongForLargeInputs.apply, name, max_side=5)
    quick = settings(max_examples=300, database=None, derandomize=True, deadline=None,
                     suppress_health_check=list(HealthCheck), print_blob=False)
    try:
        fuzz("grad", buggy, FuzzConfig(variants=4, structures=1), settings=quick)
    except FuzzFailure as failure:
        return failure.case
    raise AssertionError("the planted bug was not found")


def test_fuzz_failure_of_the_grad_check_is_shrunk():
    case = _shrunk_planted_bug("unit_planted_bug")
    (a,) = case.args
    assert case.materialize().args[0].numel() == 3
    assert len(a.shape) == 1 or sorted(a.shape)[:-1] == [1] * (len(a.shape) - 1)
    assert_plain_except(case)


def test_an_example_of_several_structures_shrinks_to_the_failing_one():
    # fuzz() draws structures // 2 to `structures` cases per Hypothesis example;
    # the failure must still shrink to one plain case that shows the bug.
    buggy = target("x: ...", _WrongForLargeInputs.apply, "unit_planted_bug", max_side=5)
    quick = settings(max_examples=300, database=None, derandomize=True, deadline=None,
                     suppress_health_check=list(HealthCheck), print_blob=False)
    try:
        fuzz("grad", buggy, FuzzConfig(variants=4, structures=4), settings=quick)
    except FuzzFailure as failure:
        case = failure.case
    else:
        raise AssertionError("the planted bug was not found")
    assert case.materialize().args[0].numel() == 3
    assert_plain_except(case)


def test_every_drawn_structure_is_run_at_every_variant():
    examples, variants, structures = 20, 3, 4
    few = settings(max_examples=examples, database=None, derandomize=True, deadline=None,
                   suppress_health_check=list(HealthCheck), print_blob=False)
    tally = fuzz("grad", target("x: n", torch.sin, "unit_sin", max_side=3),
                 FuzzConfig(variants=variants, structures=structures), settings=few)
    # every example held structures // 2 to structures of them
    assert variants * structures // 2 * examples <= tally.examples <= variants * structures * examples
    assert tally.examples % variants == 0


def test_a_structure_copied_within_an_example_runs_the_next_variants(monkeypatch):
    from hypothesis import strategies as st

    import fuzzdiff.search.fuzzing as fuzzing
    from fuzzdiff.checks.check import Check
    from fuzzdiff.verdict import Verdict
    sin = target("x: n", torch.sin, "unit_sin", max_side=3)
    case = Case("unit_sin", (Arg((2,)),), "float64")
    monkeypatch.setattr(fuzzing, "case_strategy", lambda check, target, **options: st.just(case))
    seeds = []

    def run(target, variant):
        seeds.append(variant.args[0].values.seed)
        return Verdict("pass")

    one = settings(max_examples=1, database=None, derandomize=True, deadline=None,
                   suppress_health_check=list(HealthCheck), print_blob=False)
    tally = fuzz(Check("unit_seeds", run), sin, FuzzConfig(variants=3, structures=4), settings=one)
    # the same structure two to four times: every run a new variant, none repeated
    assert tally.examples == len(seeds) >= 6 and len(set(seeds)) == len(seeds)
    assert seeds[:3] == [case.reseeded(k).args[0].values.seed for k in range(3)]


def test_structures_and_variants_must_be_positive():
    for bad in (dict(structures=0), dict(variants=0), dict(shrink_seconds=-1.0)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            FuzzConfig(**bad)


def test_a_failure_shrinks_until_the_search_budget_ends_and_at_least_min_shrink_past_it():
    """The shrink window is set when the failure is found: until the search's
    budget, never under MIN_SHRINK, never over shrink_seconds. Computed when
    the search started instead, a failure found at the end of a slow
    function's budget shrank for as long again (a compile check's 8 s share
    ran to 41 s)."""
    import time

    from fuzzdiff.search.fuzzing import MIN_SHRINK, _ShrinkBound

    def window(seconds, budget_in):
        bound = _ShrinkBound(seconds, None if budget_in is None else time.monotonic() + budget_in)
        time.sleep(0.05)
        found = time.monotonic()
        bound.failed([], None, None)  # type: ignore[arg-type]
        return None if bound.until is None else bound.until - found

    assert window(None, None) is None
    assert abs(window(10.0, None) - 10.0) < 0.01
    assert abs(window(10.0, -5.0) - MIN_SHRINK) < 0.01  # the budget was spent before the failure
    assert abs(window(10.0, 4.0) - 3.95) < 0.02  # the budget's end
    assert abs(window(1.0, 4.0) - 1.0) < 0.01  # shrink_seconds is the most


def test_shrinking_past_its_bound_draws_no_more_examples(monkeypatch):
    """Past shrink_seconds the run ends at the next example not seen failing.
    Passing such examples unrun instead still paid for every shrink step's
    draw: a module target's tour of eight cases of 23 arguments took 27 ms to
    draw, and Hypothesis tried 8,000 of them (a 10 s campaign batch ran 189 s)."""
    import fuzzdiff.search.fuzzing as fuzzing

    drawn = [0]
    first_failure: list[int] = []
    real, verdict_at = fuzzing.example_structures, fuzzing.verdict_at

    def counted_draws(*args, **kwargs):
        return real(*args, **kwargs).map(lambda cases: drawn.__setitem__(0, drawn[0] + 1) or cases)

    def noted(check, target_, case):
        verdict = verdict_at(check, target_, case)
        if verdict.failed and not first_failure:
            first_failure.append(drawn[0])
        return verdict

    monkeypatch.setattr(fuzzing, "example_structures", counted_draws)
    monkeypatch.setattr(fuzzing, "verdict_at", noted)
    buggy = target("x: ...", _WrongForLargeInputs.apply, "unit_planted_bug_bounded", max_side=5)
    quick = settings(max_examples=300, database=None, derandomize=True, deadline=None,
                     suppress_health_check=list(HealthCheck), print_blob=False)
    for seconds in (None, 0.0):
        drawn[0] = 0
        first_failure.clear()
        with pytest.raises(FuzzFailure) as found:
            fuzz("grad", buggy, FuzzConfig(variants=4, structures=1, shrink_seconds=seconds), settings=quick)
        if seconds is None:
            assert drawn[0] > first_failure[0] + 10  # shrinking in full draws many more examples
    assert found.value.shrink_cut
    assert drawn[0] <= first_failure[0] + 2, (first_failure, drawn)  # at most one more, and a replay
