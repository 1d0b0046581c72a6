"""The fuzz suite over torch's ModuleInfo database (fuzzdiff.targets.moduleinfo.adapter).

Outside the nightly profile it runs a rotating sample of
``FAMILY_SAMPLES["moduleinfo"]`` targets of ``CI_MODULES`` (tests/fuzz/sampling.py; the seed
is printed in the pytest header), every check on each, ``compile`` on
``COMPILED_PER_RUN`` of them; the nightly profile runs every target. Ids
read ``test_moduleinfo[grad-modules/nn.LSTM_0]``. A check that does not apply
is skipped with its reason; a known discrepancy is an xfail.
"""

import os
import random

import pytest
from sampling import ci_seed, in_family_sample
from verdicts import fuzz_pair

from fuzzdiff.checks import CHECKS
from fuzzdiff.targets.moduleinfo import adapter

pytest.importorskip("expecttest")

# Outside the nightly profile the sample rotates over modules whose targets are
# settled: the family's ties between arguments and float32 recurrences still meet
# false alarms (docs/pages/targets.md#moduleinfo), which a day's sample must not.
CI_MODULES = ("nn.Linear", "nn.Bilinear", "nn.Conv1d", "nn.Conv2d", "nn.Embedding", "nn.PReLU")

# compile costs a dynamo compilation per drawn structure: fewer targets
COMPILED_PER_RUN = int(os.environ.get("FUZZDIFF_MODULEINFO_COMPILED", 1))


def pytest_generate_tests(metafunc):
    if "target" not in metafunc.fixturenames:
        return
    seed = ci_seed()
    profile = getattr(metafunc.config, "_fuzzdiff_profile", "dev").split("+")[0]
    everything = adapter.moduleinfo_targets()
    plain = [t for t in everything if t.name.split("/")[1].rsplit("_", 1)[0] in CI_MODULES]
    targets = everything if profile == "nightly" else [t for t in plain if in_family_sample(t, plain, seed)]
    compiled = targets if profile == "nightly" else random.Random(f"{seed}-compile").sample(
        targets, min(COMPILED_PER_RUN, len(targets)))
    pairs = [(c, t) for t in targets for c in CHECKS.values() if c.name != "compile" or t in compiled]
    metafunc.parametrize("check,target", pairs, ids=[f"{c.name}-{t.name}" for c, t in pairs])


@pytest.mark.fuzz
def test_moduleinfo(check, target, fuzz_options):
    fuzz_pair(check, target, fuzz_options)
