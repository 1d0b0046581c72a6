"""The fuzz suite over torch's OpInfo database (fuzzdiff.targets.opinfo.adapter).

CI runs a bounded sample that rotates from run to run: ``OPS_PER_RUN`` OpInfos
(all their targets) drawn with the seed ``$FUZZDIFF_ROTATION``, by default
today's UTC date, so every day covers other ops and a failure reproduces
with the rotation printed in its test id::

    FUZZDIFF_ROTATION=20261122 CI=true pytest tests/fuzz/test_opinfo.py

``compile`` runs on ``COMPILED_PER_RUN`` of those targets (a dynamo
compilation per drawn structure), ``gradgrad``, ``dtype``, ``mutation`` and ``forward2`` on
``DEEPER_PER_RUN`` of them (they keep CI's time about what it was without them). The ``nightly`` profile runs every OpInfo
target with every check. Ids read
``test_opinfo[grad-opinfo/add@0-rot20261122]``. A check that does not apply
(the OpInfo's own flags and skips) is skipped with its reason; a run whose
only failures match a known torch discrepancy's signature
(fuzzdiff.targets.opinfo.known) is an xfail, and any other failure fails.
"""

import datetime
import os
import random

import pytest

from verdicts import fuzz_pair

from fuzzdiff.checks import CHECKS
from fuzzdiff.targets.opinfo import adapter as opinfo

OPS_PER_RUN = int(os.environ.get("FUZZDIFF_OPINFO_OPS", 5))
# compile costs a dynamo compilation per drawn structure: CI runs it on fewer targets
COMPILED_PER_RUN = int(os.environ.get("FUZZDIFF_OPINFO_COMPILED", 2))
# second derivatives, float32 and mutation: on a few of those targets
DEEPER = ("gradgrad", "dtype", "mutation", "forward2")
DEEPER_PER_RUN = int(os.environ.get("FUZZDIFF_OPINFO_DEEPER", 3))


def rotation() -> str:
    return os.environ.get("FUZZDIFF_ROTATION") or datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d")


def chosen_ops(profile: str, seed: str) -> list:
    ops = opinfo.opinfo_ops()
    if profile == "nightly":
        return ops
    return random.Random(seed).sample(ops, min(OPS_PER_RUN, len(ops)))


def pytest_generate_tests(metafunc):
    if "target" not in metafunc.fixturenames:
        return
    seed = rotation()
    profile = getattr(metafunc.config, "_fuzzdiff_profile", "dev").split("+")[0]
    checks = [c for c in CHECKS.values() if c.opinfo is not None]  # the checks with an OpInfo role
    targets = opinfo.opinfo_targets(chosen_ops(profile, seed))
    compiled = targets if profile == "nightly" else random.Random(seed).sample(
        targets, min(COMPILED_PER_RUN, len(targets)))
    deeper = targets if profile == "nightly" else random.Random(f"{seed}-deeper").sample(
        targets, min(DEEPER_PER_RUN, len(targets)))
    sampled = {"compile": compiled, **{name: deeper for name in DEEPER}}
    pairs = [(c, t) for t in targets for c in checks if t in sampled.get(c.name, targets)]
    metafunc.parametrize("check,target", pairs,
                         ids=[f"{c.name}-{t.family}/{t.name}-rot{seed}" for c, t in pairs])


@pytest.mark.fuzz
def test_opinfo(check, target, fuzz_options):
    fuzz_pair(check, target, fuzz_options)
