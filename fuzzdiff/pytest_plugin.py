"""The pytest plugin: options that pick a fuzzing profile, and crash recovery.

Opt in with ``pytest_plugins = ["fuzzdiff.pytest_plugin"]`` in a conftest.py
(fuzzdiff's own tests do): installing fuzzdiff registers nothing, so other
projects' test sessions never see it.

A guest in the session: it loads no Hypothesis profile and writes no
environment variable. The profile it picks (``--fuzzdiff-profile NAME`` or
``$FUZZDIFF_PROFILE``; ``ci`` when ``$CI`` is set, else ``dev``) is a plain
settings object plus how many value variants and structures an example runs
(in a FuzzConfig), handed to fuzz loops explicitly: ``fuzz_options(config)``
or the ``fuzz_options`` fixture, as ``fuzz(check, target, **fuzz_options)``.

The session's settings (the profile's sizes, then ``$FUZZDIFF_*``, then its
options) are resolved here once, into a FuzzConfig that the fuzz loops get in
``fuzz_options`` (``config``): nothing below the plugin reads the environment.

Crashed examples: at session start and finish (on the xdist controller, and
whenever an xdist worker dies) journal entries of dead processes under the
corpus become ``crash`` / ``timeout`` records (fuzzdiff.record.journal.recover); an
interrupted session's workers were stopped, and leave none.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings

from fuzzdiff.campaign.database import example_database
from fuzzdiff.config import FuzzConfig, default_corpus
from fuzzdiff.record.journal import forget, recover

__all__ = ["PROFILES", "VARIANTS", "STRUCTURES", "profile_settings", "fuzz_options", "default_profile"]

PROFILES: dict[str, dict[str, Any]] = {
    "ci": dict(max_examples=12, derandomize=True, database=None),
    "dev": dict(max_examples=40),
    "nightly": dict(max_examples=1000),
}
# Value-and-probe variants tried per drawn structure, and drawn structures per
# Hypothesis example (fuzzdiff.search.fuzzing.fuzz). A profile's max_examples bounds
# the examples: more structures per example is more work per example, so the
# bounded profiles draw one.
VARIANTS = {"ci": 4, "dev": 8, "nightly": 16}
STRUCTURES = {"ci": 1, "dev": 1, "nightly": 8}
# No explain phase: it re-runs a shrunk failure ~20x to annotate lines, and a
# fuzzdiff failure already carries its own verdict and case.
_COMMON: dict[str, Any] = dict(
    deadline=None,
    print_blob=True,
    phases=[p for p in Phase if p != Phase.explain],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


def default_profile() -> str:
    return os.environ.get("FUZZDIFF_PROFILE") or ("ci" if os.environ.get("CI") else "dev")


def profile_settings(name: str, redis_url: str | None = None) -> settings:
    """The Hypothesis settings of profile ``name``, with Redis beside the local
    example database when ``redis_url`` is given. Built from Hypothesis's own
    defaults, never from whatever profile a session has loaded."""
    if name not in PROFILES:
        raise ValueError(f"unknown fuzzdiff profile {name!r}; expected one of {', '.join(PROFILES)}")
    options: dict[str, Any] = {**_COMMON, **PROFILES[name]}
    if redis_url:
        options["database"] = example_database(redis_url)
    return settings(settings.get_profile("default"), **options)


def fuzz_options(config) -> dict:
    """``fuzz()``'s ``config`` and ``settings`` for this session's profile."""
    return config._fuzzdiff_options


def pytest_addoption(parser):
    group = parser.getgroup("fuzzdiff")
    group.addoption(
        "--fuzzdiff-profile",
        choices=sorted(PROFILES),
        default=None,
        help="fuzzing profile for fuzzdiff's fuzz loops (default: $FUZZDIFF_PROFILE, "
        "else 'ci' when $CI is set, else 'dev')",
    )
    group.addoption(
        "--fuzzdiff-db",
        metavar="REDIS_URL",
        default=None,
        help="share Hypothesis's example database through Redis, beside the local "
        "directory (default: $FUZZDIFF_REDIS_URL), e.g. redis://host:6379/0",
    )


def pytest_configure(config):
    name = config.getoption("--fuzzdiff-profile") or default_profile()
    # the profile's sizes, then $FUZZDIFF_*, then this session's options
    session = FuzzConfig.resolve(
        os.environ,
        base=FuzzConfig(variants=VARIANTS[name], structures=STRUCTURES[name]),
        redis_url=config.getoption("--fuzzdiff-db"),
    )
    config._fuzzdiff_config = session
    config._fuzzdiff_profile = name + ("+shared" if session.redis_url else "")
    config._fuzzdiff_options = {
        # the profile's sizes and every other setting; a record is written where a loop asks
        "config": replace(session, corpus=None),
        "settings": profile_settings(name, session.redis_url),
    }


@pytest.fixture(name="fuzz_options")
def _fuzz_options(request) -> dict:
    """``fuzz(check, target, **fuzz_options)`` runs at this session's profile."""
    return dict(fuzz_options(request.config))


def pytest_report_header(config):
    return f"fuzzdiff: profile {getattr(config, '_fuzzdiff_profile', '?')!r}"


# -- crashes: journal entries of dead processes become records (fuzzdiff.record.journal) ------


def _corpus_root() -> str:
    return str(default_corpus(os.environ))


def _recover(cause: str | None = None) -> list:
    return recover(_corpus_root(), cause=cause)


def pytest_sessionstart(session):
    """Cases that killed an earlier run become crash records before this one starts.
    Only the controller (or a run without xdist): workers would just repeat it."""
    if not hasattr(session.config, "workerinput"):
        _recover("found at the start of a later pytest session")


@pytest.hookimpl(trylast=True)  # after xdist has stopped its workers
def pytest_sessionfinish(session, exitstatus):
    """An interrupted session's workers were stopped, not crashed: a worker that
    did not unwind in time was killed by xdist, and its case in flight is
    forgotten (fuzzdiff.record.journal.forget), not recorded."""
    if not hasattr(session.config, "workerinput"):
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            forget(_corpus_root(), children_of=os.getpid())
        _recover("found at the end of the pytest session")


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):
    """An xdist worker died (abort, segfault, OOM kill, hard timeout): the
    controller outlives it, so the crash record is written now, and named in
    the failure that xdist reports for the test."""
    node = getattr(report, "node", None)
    worker = getattr(getattr(node, "gateway", None), "id", "?")
    cause = f"xdist worker {worker} crashed while running {crashitem}"
    paths = _recover(cause)
    for _ in range(20):  # xdist may see the channel close before the process is gone
        if paths:  # (an abort still writing its core dump): give it two seconds
            break
        time.sleep(0.1)
        paths = _recover(cause)
    if paths and isinstance(report.longrepr, str):
        report.longrepr += "\nfuzzdiff recorded the case in flight: " + ", ".join(map(str, paths))
