"""The pytest plugin: Hypothesis profiles and the option that picks one.

Profiles: ``ci`` (bounded, derandomized: the default when $CI is set),
``dev`` (the default otherwise) and ``nightly`` (many examples). Choose with
``--fuzzdiff-profile NAME`` or ``FUZZDIFF_PROFILE=NAME``. Each profile also
sets how many value variants a drawn structure is tried at, unless
``FUZZDIFF_VARIANTS`` is set.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

PROFILES = {
    "ci": dict(max_examples=12, derandomize=True, database=None),
    "dev": dict(max_examples=40),
    "nightly": dict(max_examples=1000),
}
# Value-and-probe variants tried per drawn structure (fuzzdiff.fuzzing.fuzz).
VARIANTS = {"ci": 4, "dev": 8, "nightly": 16}
# No explain phase: it re-runs a shrunk failure ~20x to annotate lines, and a
# fuzzdiff failure already carries its own verdict and case.
_COMMON = dict(deadline=None, print_blob=True, phases=[p for p in Phase if p != Phase.explain],
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                      HealthCheck.filter_too_much])

for _name, _opts in PROFILES.items():
    settings.register_profile(_name, **_COMMON, **_opts)


def default_profile() -> str:
    return os.environ.get("FUZZDIFF_PROFILE") or ("ci" if os.environ.get("CI") else "dev")


def pytest_addoption(parser):
    group = parser.getgroup("fuzzdiff")
    group.addoption("--fuzzdiff-profile", choices=sorted(PROFILES), default=None,
                    help="Hypothesis profile for fuzz tests (default: $FUZZDIFF_PROFILE, "
                         "else 'ci' when $CI is set, else 'dev')")


def pytest_configure(config):
    name = config.getoption("--fuzzdiff-profile") or default_profile()
    settings.load_profile(name)
    os.environ.setdefault("FUZZDIFF_VARIANTS", str(VARIANTS[name]))
    config._fuzzdiff_profile = name


def pytest_report_header(config):
    return f"fuzzdiff: hypothesis profile {getattr(config, '_fuzzdiff_profile', '?')!r}"
