"""How one fuzzed (check, target) pair turns into a pytest outcome, for every fuzz suite."""

import os
from dataclasses import replace

import pytest

from fuzzdiff.config import default_corpus
from fuzzdiff.search.fuzzing import fuzz


def fuzz_pair(check, target, profile: dict, **options) -> None:
    """Skip what cannot apply or ran only unsupported; fail on any failure,
    whatever its pair; xfail a run whose only failures matched one of the
    target's known discrepancies (fuzzdiff.targets.known: fuzz() counts those and
    searches on). Every shrunk failure is written to the corpus
    ($FUZZDIFF_CORPUS). ``profile``: the session's fuzz_options; ``options``
    override them."""
    why = check.why_not(target)
    if why is not None:
        pytest.skip(why)
    options = {**profile, **options}
    config = replace(options.pop("config"), corpus=default_corpus(os.environ))
    tally = fuzz(check, target, config, **options)
    if tally.only_unsupported:
        pytest.skip(f"unsupported: {tally.reasons['unsupported']}")
    assert tally.examples > 0
    assert tally.counts["fail"] == 0
    if tally.known:
        hits = "; ".join(f"{n} example(s): {text}" for text, n in tally.known.items())
        pytest.xfail(f"known PyTorch discrepancy only: {hits}")
