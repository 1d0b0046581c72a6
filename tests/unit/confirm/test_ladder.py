"""The confirmation ladder: steps run in the declared order, the first doubt
decides, and a failure says every step it survived; the steps it is built
from (fuzzdiff.confirm.steps) each say one thing, and the runner's exception repeat
is a ladder too."""

import math

import pytest
import torch

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.checks.check import Check
from fuzzdiff.confirm.compare import Discrepancy
from fuzzdiff.confirm.identities import EPS, Measurement, judge
from fuzzdiff.confirm.ladder import Climbed, Doubt, Ladder, Survived, repeat_only
from fuzzdiff.paths.result import Result
from fuzzdiff.search.runner import EXCEPTION_LADDER, verdict_at
from fuzzdiff.confirm.steps import (
    MARGIN,
    chain,
    float64_margin,
    float64_or_accuracy,
    float64_persists,
    identical,
    identical_to,
    kink,
    repeat,
)
from fuzzdiff.targets import get_target
from fuzzdiff.confirm.tolerance import Tolerance
from fuzzdiff.case.values import Values
from fuzzdiff.verdict import Verdict


def test_a_mismatch_that_survives_every_step_fails_and_says_so():
    ran = []
    ladder = Ladder(("repeat", "float64", "neighbours"))
    verdict = ladder.climb("a vs b", "output 0 differs", {"abs_error": 1.0}, {
        "repeat": lambda: ran.append("repeat"),
        "float64": lambda: ran.append("float64") or Survived("float64 too", {"vs_float64": 2.0}),
        "neighbours": lambda: ran.append("neighbours"),
    })
    assert ran == ["repeat", "float64", "neighbours"]
    assert verdict.kind == "fail"
    assert verdict.message == ("a vs b: output 0 differs; confirmed: survived a repeat, float64 too and "
                               "a neighbouring point")
    assert verdict.errors == {"abs_error": 1.0, "vs_float64": 2.0}


def test_the_first_doubt_decides_and_later_steps_do_not_run():
    ran = []
    ladder = Ladder(("repeat", "eps", "neighbours"))
    verdict = ladder.climb("grad", "off by 1", {}, {
        "repeat": lambda: ran.append("repeat"),
        "eps": lambda: ran.append("eps") or Doubt("agrees at eps=1e-7"),
        "neighbours": lambda: ran.append("neighbours"),
    })
    assert ran == ["repeat", "eps"]
    assert verdict.kind == "inconclusive" and verdict.message == "grad: off by 1; agrees at eps=1e-7"
    assert verdict.errors["decided_by"] == "eps"


def test_repeat_only_climbs_the_repeat_step_alone_and_claims_no_other():
    ran = []
    steps = {
        "repeat": lambda: ran.append("repeat"),
        "eps": lambda: ran.append("eps") or Doubt("agrees at eps=1e-7"),
    }
    ladder = Ladder(("repeat", "eps"))
    with repeat_only():
        verdict = ladder.climb("grad", "off by 1", {}, steps)
        doubted = ladder.climb("grad", "off by 1", {}, {"repeat": lambda: Doubt("nondeterministic")})
    assert ran == ["repeat"]
    assert verdict.kind == "fail" and verdict.message == "grad: off by 1; confirmed: survived a repeat"
    assert doubted.kind == "inconclusive"
    assert ladder.climb("grad", "off by 1", {}, steps).kind == "inconclusive"  # the whole ladder again


def test_the_kink_test_stops_at_the_first_pair_that_differs():
    made = []

    def sided(case, eps, finite):
        for k, (a, b) in enumerate(((1.0, 1.0), (1.0, 3.0), (2.0, 2.0))):
            made.append((eps, k))
            yield f"pair {k}", a, b, 0.0

    doubt = kink(sided, None, 1e-6, Tolerance(0.0, 1e-6), 1.0)()
    assert isinstance(doubt, Doubt) and "pair 1 differ" in doubt.why
    assert made == [(1e-6, 0), (1e-6 / 8, 0), (1e-6, 1), (1e-6 / 8, 1)]  # pair 2 never made


def test_a_step_left_out_does_not_apply_and_is_not_claimed():
    verdict = Ladder(("repeat", "float64")).climb("x", "y", {}, {"repeat": lambda: None})
    assert verdict.kind == "fail" and verdict.message == "x: y; confirmed: survived a repeat"


def test_a_ladder_names_known_steps_and_gets_no_stray_step():
    with pytest.raises(ValueError, match="steps are some of"):
        Ladder(("repeat", "prayer"))
    with pytest.raises(ValueError, match="not on the ladder"):
        Ladder(("repeat",)).climb("x", "y", {}, {"repeat": lambda: None, "neighbours": lambda: None})


def test_a_reference_that_changes_on_replay_is_nondeterminism_not_rounding_noise():
    # e.g. forward vs reverse mode where the reverse kernel reads memory it should not
    calls = []

    def measure(case, eps):
        calls.append(eps)
        return Measurement(1.0, 0.1 * len(calls), 1.0)

    verdict = judge("<v, J u> vs <J^T v, u>", measure, Case("exp", ()), Tolerance(1e-10, 1e-7))
    assert verdict.kind == "inconclusive" and "nondeterministic" in verdict.message, verdict
    assert verdict.errors["decided_by"] == "repeat"


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


# -- the steps a ladder is built from (fuzzdiff.confirm.steps) ------------------------------------------


def test_ascend_says_where_the_climb_ended_and_what_each_step_said():
    ladder = Ladder(("repeat", "float64", "neighbours"))
    past = ladder.ascend({"repeat": lambda: None, "float64": lambda: Survived("float64 too", {"d": 1})}, {"e": 0})
    assert past == Climbed(("a repeat", "float64 too"), {"e": 0, "d": 1})
    stopped = ladder.ascend({"repeat": lambda: None, "neighbours": lambda: Doubt("a tie")})
    assert stopped.decided_by == "neighbours" and stopped.doubt == Doubt("a tie") and stopped.survived == ("a repeat",)


def test_a_replay_that_gives_the_same_survives_and_one_that_differs_is_nondeterministic():
    runs = iter([1.0, 1.0, 2.0])
    step = repeat(lambda: next(runs), same=identical_to(1.0), times=2)
    assert step() is None
    differs = repeat(lambda: next(runs), same=identical_to(1.0), why=lambda again: f"gave {again}")
    assert differs() == Doubt("gave 2.0 (nondeterministic)")
    assert repeat(lambda: 3, same=lambda again: False)() == Doubt("a repeat gave other results (nondeterministic)")


def test_a_replay_runs_as_often_as_asked_and_stops_at_the_first_difference():
    calls = []
    step = repeat(lambda: calls.append(1) or len(calls), same=lambda n: n < 2, times=3)
    assert isinstance(step(), Doubt) and len(calls) == 2


def test_a_replay_that_survives_may_say_how():
    step = repeat(lambda: 5, same=lambda n: n > 0, label=lambda n: f"a repeat (wrong again: {n})")
    assert step() == Survived("a repeat (wrong again: 5)")
    assert repeat(lambda: 5, same=lambda n: n > 0, label=lambda n: None)() is None


def test_identical_is_bit_for_bit_with_nans_where_they_were():
    nan = float("nan")
    assert identical(torch.tensor([1.0, nan]), torch.tensor([1.0, nan]))
    assert not identical(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-12], dtype=torch.float64))
    assert not identical(torch.zeros(2), torch.zeros(3))
    assert identical((nan, 1.0), (nan, 1.0)) and not identical((nan, 1.0), (1.0, 1.0))
    assert not identical([torch.zeros(1)], [torch.zeros(1), torch.zeros(1)])
    assert identical("output 0: shape", "output 0: shape") and not identical("a", "b")


def test_identical_results_compare_tensors_and_a_skipped_path_has_nothing_to_compare():
    ran = Result.of(["output 0"], [torch.ones(2)])
    assert identical(ran, Result.of(["output 0"], [torch.ones(2)]))
    assert not identical(ran, Result.of(["output 0"], [torch.zeros(2)]))
    assert identical(ran, Result.not_run(["output 0"], "no batching rule"))


def test_a_chain_of_steps_stops_at_the_first_doubt_and_keeps_the_last_word():
    ran = []
    first, later = lambda: ran.append(1), lambda: ran.append(2) or Survived("a repeat (wrong again)")
    assert chain(first, later)() == Survived("a repeat (wrong again)") and ran == [1, 2]
    assert chain(lambda: Doubt("no"), later)() == Doubt("no") and ran == [1, 2]


def test_float64_persists_survives_a_mismatch_float64_keeps_and_doubts_one_it_loses():
    kept = Discrepancy("output 0", 1.0, 1.0)
    assert float64_persists(lambda: kept, "rounding")() == Survived(f"float64 ({kept})", {"float64": kept.summary()})
    assert float64_persists(lambda: None, "rounding")() == Doubt("rounding")


def test_float64_or_accuracy_asks_accuracy_only_where_float64_agrees():
    asked = []

    def accuracy(run):
        asked.append(run)
        return Verdict("fail", "off by 3", {"abs_error": 3.0})

    assert float64_or_accuracy(lambda: (True, "run64"), accuracy)() == Survived("float64 too") and not asked
    found = float64_or_accuracy(lambda: (False, "run64"), accuracy)()
    assert asked == ["run64"]
    assert found == Survived("a float64 run (float64 agrees, but off by 3)", {"vs_float64": {"abs_error": 3.0}})
    fine = float64_or_accuracy(lambda: (False, None), lambda run: Verdict("inconclusive", "ill-conditioned"))
    assert fine() == Doubt("float64 agrees on the same values, and ill-conditioned")


def test_float64_margin_needs_the_tested_side_margin_times_further_from_float64():
    truth = [torch.tensor([1.0, 2.0], dtype=torch.float64)]
    other = [torch.tensor([1.0 + 1e-3, 2.0])]  # off by 1e-3 itself
    tol = Tolerance(0.0, 1e-6)

    def step(tested):
        return float64_margin(["output 0"], tested, other, lambda: truth, tol, side="compiled", doubt="rounding")()

    assert step([torch.tensor([1.0 + 5e-3, 2.0])]) == Doubt("rounding")  # 5 times as far: within MARGIN
    far = step([torch.tensor([1.0 + 2e-2, 2.0])])
    assert isinstance(far, Survived) and far.label.startswith("a float64 reference (compiled vs float64: output 0")
    assert far.errors["vs_float64"]["abs_error"] == pytest.approx(2e-2, rel=1e-3)
    assert MARGIN == 10.0


def _raising(*errors):
    """A check that raises ``errors`` in turn (None: passes), one per run."""
    left = list(errors)

    def run(target, case):
        error = left.pop(0)
        if error is None:
            return Verdict("pass")
        raise error

    return Check("unit_raises", run)


def test_the_runner_confirms_an_exception_by_its_own_ladder_and_keeps_its_words():
    assert EXCEPTION_LADDER.steps == ("repeat",)
    case = Case("exp", (Arg((2,), Values(seed=1)),))
    target = get_target("exp")
    again = verdict_at(_raising(ValueError("boom"), ValueError("boom")), target, case)
    assert again.kind == "fail" and again.message == "raised ValueError: boom", again
    assert again.errors["exception"] == "ValueError"
    with repeat_only():  # the repeat is the one step a repeat_only climb keeps
        flaky = verdict_at(_raising(ValueError("boom"), None), target, case)
    assert flaky.kind == "inconclusive"
    assert flaky.message == "raised ValueError: boom once; the repeat passed (nondeterministic)"
    other = verdict_at(_raising(ValueError("boom"), KeyError("k")), target, case)
    assert other.kind == "inconclusive"
    assert other.message == "raised ValueError: boom once; the repeat raised KeyError: 'k' (nondeterministic)"
