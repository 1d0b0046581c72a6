"""The pytest plugin: Hypothesis profiles and the option that picks one.

Profiles: ``ci`` (bounded, derandomized: the default when $CI is set),
``dev`` (the default otherwise) and ``nightly`` (many examples). Choose with
``--fuzzdiff-profile NAME`` or ``FUZZDIFF_PROFILE=NAME``. Each profile also
sets how many value variants a drawn structure is tried at, and how many
structures one example draws, unless ``FUZZDIFF_VARIANTS`` or
``FUZZDIFF_STRUCTURES`` is set.

Crashed examples: at session start and finish (on the xdist controller, and
whenever an xdist worker dies) journal entries of dead processes under the
corpus become ``crash`` / ``timeout`` records (fuzzdiff.journal.recover).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, settings

PROFILES = {
    "ci": dict(max_examples=12, derandomize=True, database=None),
    "dev": dict(max_examples=40),
    "nightly": dict(max_examples=1000),
}
# Value-and-probe variants tried per drawn structure, and drawn structures per
# Hypothesis example (fuzzdiff.fuzzing.fuzz). A profile's max_examples bounds
# the examples: more structures per example is more work per example, so the
# bounded profiles draw one.
VARIANTS = {"ci": 4, "dev": 8, "nightly": 16}
STRUCTURES = {"ci": 1, "dev": 1, "nightly": 8}
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
    group.addoption("--fuzzdiff-db", metavar="REDIS_URL", default=None,
                    help="share Hypothesis's example database through Redis, beside the local "
                         "directory (default: $FUZZDIFF_REDIS_URL), e.g. redis://host:6379/0")


def pytest_configure(config):
    name = config.getoption("--fuzzdiff-profile") or default_profile()
    url = config.getoption("--fuzzdiff-db") or os.environ.get("FUZZDIFF_REDIS_URL")
    if url:
        from fuzzdiff.database import example_database
        shared = f"{name}+shared"
        settings.register_profile(shared, parent=settings.get_profile(name),
                                  database=example_database(url))
        name = shared
    settings.load_profile(name)
    base = name.removesuffix("+shared")
    os.environ.setdefault("FUZZDIFF_VARIANTS", str(VARIANTS[base]))
    os.environ.setdefault("FUZZDIFF_STRUCTURES", str(STRUCTURES[base]))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # n workers x torch's default threads oversubscribe the cores: small
        # kernels then run up to 100x slower. One thread per worker process.
        import torch
        torch.set_num_threads(1)
    config._fuzzdiff_profile = name


def pytest_report_header(config):
    return f"fuzzdiff: hypothesis profile {getattr(config, '_fuzzdiff_profile', '?')!r}"


# -- crashes: journal entries of dead processes become records (fuzzdiff.journal) ------

def _corpus_root() -> str:
    # fuzzdiff.corpus.default_root() without importing torch into every pytest run.
    return os.environ.get("FUZZDIFF_CORPUS") or "corpus"


def _recover(cause: str | None = None) -> list:
    from fuzzdiff.journal import recover
    return recover(_corpus_root(), cause=cause)


def pytest_sessionstart(session):
    """Cases that killed an earlier run become crash records before this one starts.
    Only the controller (or a run without xdist): workers would just repeat it."""
    if not hasattr(session.config, "workerinput"):
        _recover("found at the start of a later pytest session")


def pytest_sessionfinish(session, exitstatus):
    if not hasattr(session.config, "workerinput"):
        _recover("found at the end of the pytest session")


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):
    """An xdist worker died (abort, segfault, OOM kill, hard timeout): the
    controller outlives it, so the crash record is written now, and named in
    the failure that xdist reports for the test."""
    node = getattr(report, "node", None)
    worker = getattr(getattr(node, "gateway", None), "id", "?")
    paths = _recover(f"xdist worker {worker} crashed while running {crashitem}")
    if paths and isinstance(report.longrepr, str):
        report.longrepr += "\nfuzzdiff recorded the case in flight: " + ", ".join(map(str, paths))
