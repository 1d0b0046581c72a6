"""fuzzdiff.search.fresh: a failure is rerun in a fresh process before it is the target's."""

from tests.unit.fdhelpers import WRONG_SQUARE

import fuzzdiff
from fuzzdiff.case.case import Arg, Case
from fuzzdiff.search.fresh import FreshProcess
from fuzzdiff.case.values import Values
from fuzzdiff.verdict import Verdict

# A function whose backward depends on the state of its process: right in a
# fresh one, wrong once something in this process has set BROKEN (as torch's
# state is, after an internal assert elsewhere).
STATEFUL = WRONG_SQUARE + '''

BROKEN = [False]


class Twice(WrongSquare):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return (3 if BROKEN[0] else 2) * g * x
'''


def test_a_failure_that_passes_in_a_fresh_process_is_not_the_targets(importable):
    module = importable("stateful_ops", STATEFUL)
    module.BROKEN[0] = True
    report = fuzzdiff.check(module.Twice.apply, "x: n", checks=("grad",), seed=1, max_examples=20)
    assert report.ok, report.summary()
    tally = report.tallies["grad"]
    assert tally.counts["inconclusive"] > 0 and tally.counts["fail"] == 0
    assert "process-state dependent" in tally.reasons["inconclusive"]
    assert "but reruns as pass in a fresh process" in tally.reasons["inconclusive"]
    assert "process-state dependent" in report.summary()
    # without the fresh replay, the same run blames the function
    unisolated = fuzzdiff.check(module.Twice.apply, "x: n", checks=("grad",), seed=1, max_examples=20, isolate=False)
    assert [f.check for f in unisolated.failures] == ["grad"]


def test_a_failure_that_reproduces_there_is_reported_as_reproduced(importable):
    module = importable("stateful_ops", STATEFUL.replace("(3 if BROKEN[0] else 2)", "3"))
    report = fuzzdiff.check(module.Twice.apply, "x: n", checks=("grad",), seed=1, max_examples=20)
    (failure,) = report.failures
    assert failure.elsewhere == "reproduced in a fresh process"
    assert failure.blame.whose == "user" and "Twice" in failure.blame.evidence
    assert "reproduced in a fresh process" in report.summary()


def test_the_replaying_process_ends_with_its_owner(importable):
    module = importable("stateful_ops", STATEFUL.replace("(3 if BROKEN[0] else 2)", "3"))
    case = Case("stateful_ops:Twice.apply", (Arg((3,), Values(seed=2)),), "float64", params={
        "cotangent": {"seed": 1, "layout": "contiguous", "zeros": 0.0},
        "direction": {"seed": 2, "layout": "contiguous", "zeros": 0.0},
    })
    target = fuzzdiff.api.user_target(module.Twice.apply, "x: n")
    definition = fuzzdiff.api.definition(target)
    with FreshProcess() as fresh:
        first = fresh.rerun("grad", case, Verdict("fail", "<J^T v, u> vs finite differences: ..."), definition)
        child = fresh._proc
        second = fresh.rerun("grad", case, Verdict("fail", "<J^T v, u> vs finite differences: ..."), definition)
        assert fresh._proc is child  # one process serves every replay
    assert first.verdict.kind == second.verdict.kind == "fail" and first.blame.whose == "user"
    assert child.poll() is not None and fresh._proc is None  # and it is gone once its owner closes it


def test_a_target_that_cannot_be_rebuilt_there_says_why():
    with FreshProcess() as fresh:
        case = Case("not_a_target_anywhere", (Arg((2,), Values()),), "float64")
        answer = fresh.rerun("grad", case, Verdict("fail", "x: y"))
    assert answer.verdict is None and "unknown target 'not_a_target_anywhere'" in answer.failed


SLOW = '''
import time


def slow(x):
    time.sleep(0.6)  # an example of several calls runs past a 1 s time-out
    return x * 2


def hung(x):
    time.sleep(1000)
    return x
'''


def test_a_time_out_of_slow_code_is_inconclusive_and_a_hang_stays_a_time_out(importable):
    """A time-out is confirmed like any failure: given five times as long in a
    fresh process, slow code finishes there (not a hang: inconclusive, saying
    how to give it longer), and hung code does not (a time-out, as reported)."""
    from fuzzdiff.config import FuzzConfig

    module = importable("slow_ops", SLOW)
    options = dict(checks=("grad",), max_examples=1, seed=0, shrink_seconds=0, config=FuzzConfig(timeout=1.0))
    slow = fuzzdiff.check(module.slow, "x: n", **options)
    assert slow.ok, slow.summary()
    assert "slow, not hung" in slow.tallies["grad"].reasons["inconclusive"]
    hung = fuzzdiff.check(module.hung, "x: n", **options)
    (failure,) = hung.failures
    assert "did not finish" in failure.message and "does not finish in a fresh process either" in failure.elsewhere


SLOW_HERE = WRONG_SQUARE + '''
import os
import time


class WrongSlowHere(WrongSquare):
    """WrongSquare, whose backward takes long in the test's own process only:
    every example times out there and fails in a fresh one."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        if x.numel() and os.getpid() == int(os.environ["FUZZDIFF_TEST_SLOW_PID"]):
            time.sleep(2.0)
        return WrongSquare.backward(ctx, g)
'''


def test_a_timed_out_failure_found_again_in_a_fresh_process_is_reported_once(importable, monkeypatch):
    import os

    from fuzzdiff.config import FuzzConfig

    monkeypatch.setenv("FUZZDIFF_TEST_SLOW_PID", str(os.getpid()))
    module = importable("slow_here_ops", SLOW_HERE)
    report = fuzzdiff.check(module.WrongSlowHere.apply, "x: 3", checks=("grad",), max_examples=4, seed=0,
                            shrink_seconds=0, config=FuzzConfig(timeout=1.0))
    (failure,) = report.failures  # the next runs' time-outs fail the same way there: counted, not reported
    assert failure.elsewhere.startswith("found in a fresh process, where the example ran past")
    tally = report.tallies["grad"]
    assert sum(tally.repeats.values()) >= 1, tally
