"""The zoo through the user-facing doors: ``fuzzdiff.check`` and ``fuzzdiff check``.

Every planted bug must be found, and its twin must pass, whichever door the
user comes through; a found bug's record must replay from a fresh process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import fuzzdiff
from fuzzdiff.cli import main
from fuzzdiff.corpus.repro import replay
from tests.selftest.zoo import ZOO

pytestmark = pytest.mark.selftest

FIND_EXAMPLES = 200  # as test_zoo: every bug is found within this many examples
TWIN_EXAMPLES = 20   # test_zoo runs every check on the twins; here the designated one

IDS = [p.name for p in ZOO]
# The command is the same code behind an argument parser: one bug per check is enough.
ONE_PER_CHECK = list({p.check: p for p in ZOO}.values())
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("planted", ZOO, ids=IDS)
def test_check_finds_the_bug_and_passes_the_twin(planted, tmp_path):
    report = fuzzdiff.check(planted.bug, checks=[planted.check], max_examples=FIND_EXAMPLES, seed=0,
                            corpus=tmp_path)
    assert not report.ok, report.summary()
    # one root cause of the planted check; anything else is the bug's own function raising, once each
    failure, = [f for f in report.failures if f.check == planted.check]
    assert failure.record_path is not None and failure.blame.whose == "user", report.summary()
    assert all(f.check == "input-domain" and f.blame.whose == "user" for f in report.failures if f is not failure)
    assert replay(failure.record_path).failed
    twin = fuzzdiff.check(planted.twin, checks=[planted.check], max_examples=TWIN_EXAMPLES, seed=0)
    assert twin.ok, twin.summary()


@pytest.mark.parametrize("planted", ONE_PER_CHECK, ids=[p.name for p in ONE_PER_CHECK])
def test_the_check_command_finds_the_bug_and_passes_the_twin(planted, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)  # the command imports the zoo by its module path, from the repo root
    common = ["--checks", planted.check, "--seed", "1", "--corpus", str(tmp_path)]
    assert main(["check", planted.bug.origin, "--max-examples", str(FIND_EXAMPLES), *common]) == 1
    out = capsys.readouterr().out
    assert f"FAILED {planted.check}" in out and "fuzzdiff repro" in out
    assert main(["check", planted.twin.origin, "--max-examples", str(TWIN_EXAMPLES), *common]) == 0
