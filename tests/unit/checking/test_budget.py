"""A ``fuzzdiff.check`` call's time budget: each check's share of it, what
it cuts short and the summary's word on it; none when max_examples is given.
The budget is a ceiling: a slow function's call, a failure's shrinking and
its rerun in a fresh process included, ends within it and 2 s more (the
one timed assertion of the suite, with the slack the promise itself has)."""

from __future__ import annotations

import time

import pytest
import torch

import fuzzdiff
from fuzzdiff.checking.budget import CEILING, WRAP_UP, Spent, reaching, share, weight
from tests.unit.fdhelpers import WrongSquare


def _slow(x):
    time.sleep(0.05)
    return torch.sin(x)


def test_the_time_budget_cuts_a_check_short_and_says_so():
    start = time.monotonic()
    report = fuzzdiff.check(_slow, "x: n", checks=("grad", "forward"), budget=1.0, seed=0, progress=False)
    assert time.monotonic() - start < 10
    assert report.ok and all(report.tallies[name].cut for name in ("grad", "forward")), report.summary()
    assert report.tallies["grad"].cases < 100
    assert "thin: grad judged" in report.summary() and "cut by the time budget" in report.summary()


def test_the_shares_leave_part_of_the_budget_for_the_wrap_up():
    now = time.monotonic()
    alone = share(now, 20.0, ["grad"])
    assert alone is not None and alone - now == pytest.approx((1 - WRAP_UP) * 20.0, abs=0.5)
    first = share(now, 20.0, ["grad", "compile"])  # compile weighs more: grad's share is the smaller
    assert first is not None and first - now == pytest.approx(
        (1 - WRAP_UP) * 20.0 * weight("grad") / (weight("grad") + weight("compile")), abs=0.5
    )
    assert share(now, None, ["grad"]) is None


def test_max_examples_keeps_its_meaning_without_a_budget():
    report = fuzzdiff.check(torch.sin, "x: n", checks=("grad",), max_examples=5, seed=0, progress=False)
    assert not report.tallies["grad"].cut and report.tallies["grad"].cases >= 5
    with pytest.raises(ValueError, match="budget"):
        fuzzdiff.check(torch.sin, "x: n", budget=0)


def test_by_default_every_check_runs_and_compile_last():
    """Within a budget a check after compile would get only what compile's
    unpredictable cases left; the caller's own order is kept."""
    from fuzzdiff.api import _checks
    from fuzzdiff.checks import CHECKS

    names = _checks(None)
    assert sorted(names) == sorted(CHECKS) and names[-1] == "compile"
    assert [n for n in names if n != "compile"] == [n for n in CHECKS if n != "compile"]
    assert _checks(("compile", "grad")) == ["compile", "grad"]


def test_compile_run_last_gets_at_most_its_part_of_the_budget():
    """Last, compile would fill whatever the other checks left."""
    from fuzzdiff.checking.budget import MOST

    now = time.monotonic()
    last = share(now, 30.0, ["compile"])
    assert last is not None and last - now == pytest.approx(MOST["compile"] * 30.0, abs=0.5)
    assert share(now, 30.0, ["grad"]) - now == pytest.approx((1 - WRAP_UP) * 30.0, abs=0.5)  # the others: all left
    late = share(now - 25.0, 30.0, ["compile"])  # little left: that, not the cap
    assert late is not None and late - now == pytest.approx((1 - WRAP_UP) * 30.0 - 25.0, abs=0.5)


def _sleepy(x):
    time.sleep(0.3)  # a call of a slow function: one case of grad calls it about twenty times
    return torch.sin(x)


class _SlowWrongSquare(torch.autograd.Function):
    """x**2 at 0.05 s a call, whose backward says 3 x: found wrong in seconds,
    each of its cases (and its shrink steps, its replay) a second or so."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        time.sleep(0.05)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * g * x


def test_a_slow_functions_call_ends_within_its_budget():
    """Asking whether it is random, and the case in flight at the budget's end,
    would each run seconds past it: the asking is cut at its part, the case stopped."""
    start = time.monotonic()
    report = fuzzdiff.check(_sleepy, "x: n", budget=8, seed=0, progress=False)
    elapsed = time.monotonic() - start
    assert elapsed <= 8 + CEILING, (elapsed, report.summary())
    assert report.thin["grad"].reason == "cut" and report.thin["compile"].reason == "not reached", report.thin
    assert "not asked whether it draws random numbers" in report.summary()


def test_a_slow_function_that_fails_is_shrunk_and_confirmed_within_its_budget():
    start = time.monotonic()
    report = fuzzdiff.check(_SlowWrongSquare.apply, "x: n>=1", checks=("grad",), budget=8, seed=0, progress=False)
    elapsed = time.monotonic() - start
    assert elapsed <= 8 + CEILING, (elapsed, report.summary())
    # found, and either confirmed in a fresh process or said to be unconfirmed: never reported unconfirmed
    ((check, said),) = [(f.check, f.elsewhere) for f in report.failures + report.unconfirmed]
    assert check == "grad", report.summary()
    assert said == "reproduced in a fresh process" if report.failures else said.startswith("not confirmed")


def test_a_failure_the_budget_leaves_no_time_to_confirm_is_not_reported_as_failed(monkeypatch):
    monkeypatch.setattr("fuzzdiff.api.SETTLING", -100.0)  # its rerun in a fresh process is due before it is found
    report = fuzzdiff.check(WrongSquare.apply, "x: n m", checks=("grad",), budget=30, seed=0, progress=False)
    assert report.ok and not report.failures, report.summary()
    (found,) = report.unconfirmed
    assert found.check == "grad" and found.elsewhere.startswith("not confirmed: ")
    assert report.row("grad")["failed"] == 0 and report.row("grad")["inconclusive"] > 0
    assert "NOT CONFIRMED grad" in report.summary()


def test_a_check_that_judged_few_cases_is_thin_and_one_never_started_is_not_reached():
    def slowish(x):
        time.sleep(0.02)
        return torch.sin(x)

    report = fuzzdiff.check(slowish, "x: n", checks=("grad", "compile"), budget=2, seed=0, progress=False)
    assert report.thin["grad"].reason == "cut" and 0 < report.thin["grad"].cases < 10, report.summary()
    assert report.thin["compile"] == (0, "not reached", report.thin["compile"].why)
    assert report.row("compile")["examples"] == 0 and report.reach["compile"] is not None
    text = report.summary()
    assert f"thin: grad judged {report.thin['grad'].cases} case" in text and "cut by the time budget" in text
    assert "compile did not run (not reached) within the 2 s budget: " in text
    assert f"under its 5 s floor; budget={report.reach['compile']} would reach it" in text


def test_the_budget_that_would_reach_a_check_follows_the_shares():
    """What the others took again (those that finished) or their shares (those cut), then the floor."""
    names = ["grad", "forward", "compile"]
    finished = {"grad": Spent(4.0, False, 0.01), "forward": Spent(4.0, False, 0.01)}
    assert reaching("compile", names, finished, 0.0, 10.0) == 20  # 0.9 * 20 - 8 = 10, a third of 20 > 5
    cut = {"grad": Spent(5.0, True, 0.01), "forward": Spent(4.0, True, 0.01)}
    assert reaching("compile", names, cut, 0.0, 10.0) == 20  # every check its share: compile's a third
    slow = {"grad": Spent(50.0, True, 5000.0), "forward": Spent(0.0, True, 0.0)}
    assert reaching("compile", names, slow, 0.0, 10.0) is None  # one case of grad outlasts any budget
