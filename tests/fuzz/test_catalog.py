"""The fuzz suite: one Hypothesis test per (check, catalog target).

Test ids read ``test_fuzz[grad-unary/log]``. A check that cannot apply is
skipped with its reason; a known PyTorch discrepancy is an xfail that names
its evidence; an all-unsupported run skips with the reason torch gave. Every
shrunk failure, known or new, is written to the corpus ($FUZZDIFF_CORPUS).
"""

import pytest

from fuzzdiff.checks import CHECKS
from fuzzdiff.corpus import default_root
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
        tally = fuzz(check, target, corpus=default_root())
    except FuzzFailure as failure:
        if check.name in target.known:
            pytest.xfail(f"known PyTorch discrepancy: {target.known[check.name]} "
                         f"(record {failure.record_path})")
        raise
    if tally.only_unsupported:
        pytest.skip(f"unsupported: {tally.reasons['unsupported']}")
    assert tally.examples > 0
    assert tally.counts["fail"] == 0
