"""What the self-test relies on in the fuzzing harness itself.

Regression tests for harness bugs the zoo ran into: each would make a planted
bug look like another check's failure, or stop a fuzzing run altogether.
"""

from __future__ import annotations

import pytest

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.checks import Check, get_check
from fuzzdiff.search.fuzzing import fuzz
from fuzzdiff.search.runner import run_check
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict
from fuzzdiff.config import FuzzConfig
from tests.selftest.detection import fuzz_settings
from tests.selftest.zoo import by_name

pytestmark = pytest.mark.selftest


def test_several_scored_variants_in_one_example_do_not_stop_the_run():
    """Every variant of an example may carry an error score; Hypothesis allows
    one target() per label and example, so fuzz() must report only the largest."""
    unsure = Check("unsure", lambda t, c: Verdict("inconclusive", "unsure",
                                                  {"abs_error": 1.0, "scale": 2.0}))
    tally = fuzz(unsure, Target("identity", lambda x: x, "x: n"), FuzzConfig(variants=4, structures=1),
                 settings=fuzz_settings(3, shrink=False))
    assert tally.counts["inconclusive"] == tally.examples >= 4


@pytest.mark.parametrize("check", ["grad", "alias"])
def test_a_mutating_backward_is_not_reported_as_a_wrong_derivative(check):
    """The backward of xtanh_scratch writes into its input; its derivative is
    right. Only the mutation check may flag it: grad must not measure the
    finite differences at the clobbered point, nor alias clone clobbered args."""
    p = by_name("xtanh_scratch")
    tally = fuzz(check, p.bug, FuzzConfig(variants=2, structures=1), settings=fuzz_settings(20, shrink=False))
    assert tally.counts["fail"] == 0 and tally.counts["pass"] > 0
    case = Case(p.bug.name, (Arg((3,)),))
    assert run_check(get_check("mutation"), p.bug, case).failed
    assert run_check(get_check("grad"), p.bug, case).kind == "pass"
