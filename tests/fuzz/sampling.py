"""Which (check, target) pairs the CI profile runs, for checks with a CiSample.

The sample rotates from run to run but is reproducible: the seed is
$FUZZDIFF_CI_SEED, else $GITHUB_RUN_NUMBER, else today's UTC date as YYYYMMDD.
The pytest header prints it; ``FUZZDIFF_CI_SEED=<seed> CI=true pytest tests/fuzz``
runs the same sample again.
"""

from __future__ import annotations

import datetime
import fnmatch
import os
import random

from fuzzdiff.checks import Check
from fuzzdiff.targets.target import Target

__all__ = ["ci_seed", "in_ci_sample", "in_family_sample", "FAMILY_SAMPLES"]

# Families too large to run whole in every CI run: a rotating sample of this
# many of their targets, every check on each (other profiles and the campaign
# run them all). The distributions (262 targets) cost 6.5 minutes of one core whole;
# the ModuleInfo targets (tests/fuzz/test_moduleinfo.py) a module build per call.
FAMILY_SAMPLES = {"distributions": 60, "moduleinfo": 3}


def ci_seed() -> int:
    for var in ("FUZZDIFF_CI_SEED", "GITHUB_RUN_NUMBER"):
        if os.environ.get(var, "").strip().isdigit():
            return int(os.environ[var])
    return int(datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d"))


def _always(check: Check, target: Target) -> bool:
    return any(fnmatch.fnmatchcase(target.name, p) for p in check.ci.always)


def sample(check: Check, targets: list[Target], seed: int) -> set[str]:
    """Names of the targets the CI profile runs ``check`` on."""
    eligible = sorted(t.name for t in targets if check.why_not(t) is None and not _always(check, t))
    rng = random.Random(f"{check.name}:{seed}")
    drawn = rng.sample(eligible, min(check.ci.targets, len(eligible)))
    return set(drawn) | {t.name for t in targets if _always(check, t)}


def in_ci_sample(check: Check, target: Target, targets: list[Target], seed: int) -> bool:
    return check.ci is None or target.name in sample(check, targets, seed)


def in_family_sample(target: Target, targets: list[Target], seed: int) -> bool:
    """Whether the CI profile runs ``target``: every target, except those of a
    family in FAMILY_SAMPLES outside this run's sample of it."""
    size = FAMILY_SAMPLES.get(target.family)
    if size is None:
        return True
    names = sorted(t.name for t in targets if t.family == target.family)
    return target.name in set(random.Random(f"{target.family}:{seed}").sample(names, min(size, len(names))))
