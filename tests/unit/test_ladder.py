"""The confirmation ladder: steps run in the declared order, the first doubt
decides, and a failure says every step it survived."""

import math

import pytest

from fuzzdiff.case import Case
from fuzzdiff.confirm import EPS, Measurement, judge
from fuzzdiff.confirm import kink
from fuzzdiff.ladder import Doubt, Ladder, Survived, replay_only
from fuzzdiff.tolerance import Tolerance


def test_a_mismatch_that_survives_every_step_fails_and_says_so():
    ran = []
    ladder = Ladder(("replay", "float64", "neighbours"))
    verdict = ladder.climb("a vs b", "output 0 differs", {"abs_error": 1.0}, {
        "replay": lambda: ran.append("replay"),
        "float64": lambda: ran.append("float64") or Survived("float64 too", {"vs_float64": 2.0}),
        "neighbours": lambda: ran.append("neighbours"),
    })
    assert ran == ["replay", "float64", "neighbours"]
    assert verdict.kind == "fail"
    assert verdict.message == ("a vs b: output 0 differs; confirmed: survived replay, float64 too and "
                               "a neighbouring point")
    assert verdict.errors == {"abs_error": 1.0, "vs_float64": 2.0}


def test_the_first_doubt_decides_and_later_steps_do_not_run():
    ran = []
    ladder = Ladder(("replay", "eps", "neighbours"))
    verdict = ladder.climb("grad", "off by 1", {}, {
        "replay": lambda: ran.append("replay"),
        "eps": lambda: ran.append("eps") or Doubt("agrees at eps=1e-7"),
        "neighbours": lambda: ran.append("neighbours"),
    })
    assert ran == ["replay", "eps"]
    assert verdict.kind == "inconclusive" and verdict.message == "grad: off by 1; agrees at eps=1e-7"
    assert verdict.errors["decided_by"] == "eps"


def test_replay_only_climbs_the_replay_step_alone_and_claims_no_other():
    ran = []
    steps = {
        "replay": lambda: ran.append("replay"),
        "eps": lambda: ran.append("eps") or Doubt("agrees at eps=1e-7"),
    }
    ladder = Ladder(("replay", "eps"))
    with replay_only():
        verdict = ladder.climb("grad", "off by 1", {}, steps)
        doubted = ladder.climb("grad", "off by 1", {}, {"replay": lambda: Doubt("nondeterministic")})
    assert ran == ["replay"]
    assert verdict.kind == "fail" and verdict.message == "grad: off by 1; confirmed: survived replay"
    assert doubted.kind == "inconclusive"
    assert ladder.climb("grad", "off by 1", {}, steps).kind == "inconclusive"  # the whole ladder again


def test_the_kink_test_stops_at_the_first_pair_that_differs():
    made = []

    def sided(case, eps, finite):
        for k, (a, b) in enumerate(((1.0, 1.0), (1.0, 3.0), (2.0, 2.0))):
            made.append((eps, k))
            yield f"pair {k}", a, b, 0.0

    doubt = kink(sided, None, 1e-6, Tolerance(0.0, 1e-6), 1.0)
    assert isinstance(doubt, Doubt) and "pair 1 differ" in doubt.why
    assert made == [(1e-6, 0), (1e-6 / 8, 0), (1e-6, 1), (1e-6 / 8, 1)]  # pair 2 never made


def test_a_step_left_out_does_not_apply_and_is_not_claimed():
    verdict = Ladder(("replay", "float64")).climb("x", "y", {}, {"replay": lambda: None})
    assert verdict.kind == "fail" and verdict.message == "x: y; confirmed: survived replay"


def test_a_ladder_names_known_steps_and_gets_no_stray_step():
    with pytest.raises(ValueError, match="steps are some of"):
        Ladder(("replay", "prayer"))
    with pytest.raises(ValueError, match="not on the ladder"):
        Ladder(("replay",)).climb("x", "y", {}, {"replay": lambda: None, "neighbours": lambda: None})


def test_a_reference_that_changes_on_replay_is_nondeterminism_not_rounding_noise():
    # e.g. forward vs reverse mode where the reverse kernel reads memory it should not
    calls = []

    def measure(case, eps):
        calls.append(eps)
        return Measurement(1.0, 0.1 * len(calls), 1.0)

    verdict = judge("<v, J u> vs <J^T v, u>", measure, Case("exp", ()), Tolerance(1e-10, 1e-7))
    assert verdict.kind == "inconclusive" and "nondeterministic" in verdict.message, verdict
    assert verdict.errors["decided_by"] == "replay"


@pytest.mark.parametrize("analytic", [float("nan"), 3.0])
def test_a_reference_that_grows_like_one_over_eps_is_a_jump_not_a_derivative(analytic):
    """Central differences across a jump of height 2 are 1/eps: they grow
    eightfold per step of eight, and stay put when eps moves by 0.1%."""
    verdict = judge("x", lambda case, eps: Measurement(analytic, 1.0 / eps, 1.0), Case("exp", ()),
                    Tolerance(1e-10, 1e-7))
    assert verdict.kind == "inconclusive" and "grows as eps shrinks" in verdict.message, verdict
    assert verdict.errors["decided_by"] == "eps"


def test_a_reference_that_settles_as_eps_shrinks_still_confirms_a_wrong_derivative():
    verdict = judge("x", lambda case, eps: Measurement(3.0, 1.0 + eps, 1.0), Case("exp", ()),
                    Tolerance(1e-10, 1e-7))
    assert verdict.errors.get("decided_by") != "eps" and "grows as eps shrinks" not in verdict.message, verdict


def test_rounding_noise_that_grows_as_eps_shrinks_is_not_a_jump():
    """Round-off grows like 1/eps too, but moves when eps moves by 0.1%."""

    def measure(case, eps):
        sign = 1 if any(math.isclose(eps, e) for e in (EPS, EPS / 8, EPS * 8)) else -1
        return Measurement(3.0, 1e-9 * sign / eps, 1.0)

    verdict = judge("x", measure, Case("exp", ()), Tolerance(1e-10, 1e-7))
    assert "grows as eps shrinks" not in verdict.message, verdict
    assert verdict.errors.get("decided_by") != "eps"
