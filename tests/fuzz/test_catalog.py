"""The fuzz suite: one Hypothesis test per (check, catalog target).

Test ids read ``test_fuzz[grad-unary/log]``. A check that cannot apply is
skipped with its reason; a known PyTorch discrepancy is an xfail that names
its evidence; an all-unsupported run skips with the reason torch gave.
"""

import pytest

from fuzzdiff.checks import CHECKS
from fuzzdiff.fuzzing import FuzzFailure, fuzz
from fuzzdiff.targets import all_targets

PAIRS = [(c, t) for c in CHECKS.values() for t in all_targets()]


@pytest.mark.fuzz
@pytest.mark.parametrize("check,target", PAIRS, ids=[f"{c.name}-{t.family}/{t.name}" for c, t in PAIRS])
def test_fuzz(check, target):
    why = check.why_not(target)
    if why is not None:
        pytest.skip(why)
    try:
        tally = fuzz(check, target)
    except FuzzFailure:
        if check.name in target.known:
            pytest.xfail(f"known PyTorch discrepancy: {target.known[check.name]}")
        raise
    if tally.only_unsupported:
        pytest.skip(f"unsupported: {tally.reasons['unsupported']}")
    assert tally.examples > 0
    assert tally.counts["fail"] == 0
