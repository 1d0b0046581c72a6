"""How one fuzzed (check, target) pair turns into a pytest outcome, for every fuzz suite."""

import pytest

from fuzzdiff.corpus import default_root
from fuzzdiff.fuzzing import FuzzFailure, fuzz


def fuzz_pair(check, target, profile: dict, **options) -> None:
    """Skip what cannot apply or ran only unsupported; xfail a known discrepancy
    when, and only when, it is the failure found; fail on anything else. Every
    shrunk failure is written to the corpus ($FUZZDIFF_CORPUS). ``profile``:
    the session's fuzz_options; ``options`` override them."""
    why = check.why_not(target)
    if why is not None:
        pytest.skip(why)
    try:
        tally = fuzz(check, target, corpus=default_root(), **{**profile, **options})
    except FuzzFailure as failure:
        # Only a confirmed discrepancy is the known one: a crash or a hang is news.
        if check.name in target.known and failure.verdict.kind == "fail":
            pytest.xfail(f"known PyTorch discrepancy: {target.known[check.name]} "
                         f"(record {failure.record_path})")
        raise
    if tally.only_unsupported:
        pytest.skip(f"unsupported: {tally.reasons['unsupported']}")
    assert tally.examples > 0
    assert tally.counts["fail"] == 0
