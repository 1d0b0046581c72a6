"""The fuzz suite: one Hypothesis test per (check, catalog target).

Test ids read ``test_fuzz[grad-unary/log]``. A check that cannot apply is
skipped with its reason; a known PyTorch discrepancy is an xfail that names
its evidence; an all-unsupported run skips with the reason torch gave. Every
shrunk failure, known or new, is written to the corpus ($FUZZDIFF_CORPUS).

A check with a ``CiSample`` (compile) runs, in the CI profile, only on its
sample of targets, with fewer examples, and a family too large to run whole
(distributions) runs a sample of its targets; tests/fuzz/sampling.py says how
the samples rotate and how to rerun one.
"""

import pytest
from hypothesis import settings
from sampling import ci_seed, in_ci_sample, in_family_sample
from verdicts import fuzz_pair

from fuzzdiff.checks import CHECKS
from fuzzdiff.targets import all_targets

TARGETS = all_targets()
PAIRS = [(c, t) for c in CHECKS.values() for t in TARGETS]


@pytest.mark.fuzz
@pytest.mark.parametrize("check,target", PAIRS, ids=[f"{c.name}-{t.family}/{t.name}" for c, t in PAIRS])
def test_fuzz(check, target, request, fuzz_options):
    options = {}
    in_ci = request.config._fuzzdiff_profile.split("+")[0] == "ci"
    if in_ci and not in_family_sample(target, TARGETS, ci_seed()):
        pytest.skip(f"not in this CI run's sample of the {target.family} family (seed {ci_seed()})")
    if check.ci is not None and check.why_not(target) is None \
            and request.config._fuzzdiff_profile.split("+")[0] == "ci":
        if not in_ci_sample(check, target, TARGETS, ci_seed()):
            pytest.skip(f"not in this CI run's sample for {check.name} (seed {ci_seed()})")
        if check.ci.max_examples is not None:
            options["settings"] = settings(fuzz_options["settings"], max_examples=check.ci.max_examples)
    fuzz_pair(check, target, fuzz_options, **options)
