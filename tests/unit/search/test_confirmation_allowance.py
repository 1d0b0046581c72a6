"""A mismatch's confirmation has a time allowance within a time budget: on a
slow function its steps cost hundreds of calls, and one failure's confirmation
took 13 s of a 30 s call, leaving 14 checks unrun. Past the allowance the
climb stops; the mismatch is reported as not confirmed, with its case, and the
search ends so that the checks after it keep their time."""

import time

import pytest
from hypothesis import settings
from tests.unit.fdhelpers import WrongSquare, target

from fuzzdiff.config import FuzzConfig
from fuzzdiff.confirm.ladder import ConfirmationCut, Ladder, confirming_by, on_time
from fuzzdiff.search import fuzzing
from fuzzdiff.search.fuzzing import CONFIRM_MIN, Search, fuzz

FAST = settings(max_examples=20, database=None, deadline=None)
WRONG = target("x: n", WrongSquare.apply, "unit_wrong_square_allowance", min_side=1)


def test_a_climb_past_its_allowance_stops_with_its_finding_unconfirmed():
    ran = []
    steps = {"repeat": lambda: ran.append("repeat"), "eps": lambda: ran.append("eps")}
    with confirming_by(time.monotonic() - 1.0), pytest.raises(ConfirmationCut) as cut:
        Ladder(("repeat", "eps")).climb("<J^T v, u> vs finite differences", "analytic 3 vs reference 2", {}, steps)
    assert ran == ["repeat"]  # the repeat shows there is something to confirm; the next step is not begun
    assert cut.value.finding.kind == "fail"
    assert cut.value.finding.message == "<J^T v, u> vs finite differences: analytic 3 vs reference 2"


def test_without_an_allowance_or_within_it_the_climb_is_whole():
    steps = {"repeat": lambda: None, "eps": lambda: None}
    for instant in (None, time.monotonic() + 60):
        with confirming_by(instant):
            on_time()
            verdict = Ladder(("repeat", "eps")).climb("identity", "finding", {}, steps)
        assert verdict.kind == "fail" and "survived a repeat and eps/8 and 8*eps" in verdict.message


def test_the_allowance_is_the_budget_or_confirm_min_from_the_case_never_past_the_deadline():
    assert fuzzing._allowance(None, None, 5.0) is None  # no time budget: no allowance
    assert fuzzing._allowance(20.0, None, 5.0) == 20.0
    assert fuzzing._allowance(6.0, None, 5.0) == 5.0 + CONFIRM_MIN
    assert fuzzing._allowance(6.0, 7.0, 5.0) == 7.0


def test_a_failure_whose_confirmation_runs_out_of_time_is_unconfirmed_not_lost(monkeypatch):
    monkeypatch.setattr(fuzzing, "_allowance", lambda until, deadline, began: began)
    now = time.monotonic()
    tally = fuzz("grad", WRONG, FuzzConfig(seed=0), settings=FAST, search=Search(until=now + 60, deadline=now + 120))
    assert tally.cut and "while a failure found was confirmed" in tally.cut_reason
    (found,) = tally.unconfirmed
    assert found.check == "grad" and "vs finite differences" in found.verdict.message
    assert found.case.args and "budget=" in found.unconfirmed
    assert tally.counts["inconclusive"] == 1 and "fail" not in tally.counts


def test_the_same_failure_within_its_allowance_is_confirmed():
    now = time.monotonic()
    with pytest.raises(fuzzing.FuzzFailure) as failed:
        fuzz("grad", WRONG, FuzzConfig(seed=0), settings=FAST, search=Search(until=now + 60, deadline=now + 120))
    assert "confirmed: survived" in failed.value.verdict.message
