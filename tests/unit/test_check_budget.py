"""A ``fuzzdiff.check`` call's time budget: each check's share of it, what
it cuts short and the summary's word on it; none when max_examples is given."""

from __future__ import annotations

import time

import pytest
import torch

import fuzzdiff
from fuzzdiff.check_budget import WRAP_UP, share, weight


def _slow(x):
    time.sleep(0.05)
    return torch.sin(x)


def test_the_time_budget_cuts_a_check_short_and_says_so():
    start = time.monotonic()
    report = fuzzdiff.check(_slow, "x: n", checks=("grad", "forward"), budget=1.0, seed=0, progress=False)
    assert time.monotonic() - start < 10
    assert report.ok and all(report.tallies[name].cut for name in ("grad", "forward")), report.summary()
    assert report.tallies["grad"].cases < 100
    assert "time budget 1 s" in report.summary()


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
    from fuzzdiff.check_budget import MOST

    now = time.monotonic()
    last = share(now, 30.0, ["compile"])
    assert last is not None and last - now == pytest.approx(MOST["compile"] * 30.0, abs=0.5)
    assert share(now, 30.0, ["grad"]) - now == pytest.approx((1 - WRAP_UP) * 30.0, abs=0.5)  # the others: all left
    late = share(now - 25.0, 30.0, ["compile"])  # little left: that, not the cap
    assert late is not None and late - now == pytest.approx((1 - WRAP_UP) * 30.0 - 25.0, abs=0.5)
