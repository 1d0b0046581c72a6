"""A case that kills the process is still recorded (fuzzdiff.record.journal).

The aborting target calls ``os.abort()`` when its argument has 3 elements and
a first value above 0.5: a structure *and* a value condition, so the journal
must name the right drawn case and the right value variant. The fuzzing runs
in a subprocess, which dies with SIGABRT; recovery then writes exactly one
``crash`` record, and replaying that record in another subprocess aborts
again: proof that it is the case that killed the process.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings

import fuzzdiff
from fuzzdiff.checks import get_check
from fuzzdiff.record.files import read_record
from fuzzdiff.search.fuzzing import fuzz
from fuzzdiff.record.journal import INFLIGHT, Journal, case_json, recover
from fuzzdiff.record.format import case_from_json
from fuzzdiff.corpus.repro import replay
from fuzzdiff.search.runner import case_strategy
from fuzzdiff.targets import get_target
from fuzzdiff.config import FuzzConfig

REPO = Path(fuzzdiff.__file__).resolve().parents[1]


def _leftovers(corpus: Path) -> list[Path]:
    """Journal entries and hang files: what recovery must consume."""
    return sorted(p for p in (corpus / INFLIGHT).glob("*") if p.suffix in (".json", ".hang"))

ABORTING = textwrap.dedent('''
    import os
    from fuzzdiff.targets import Target

    def fn(x):
        if x.shape[0] == 3 and float(x.detach().double()[0]) > 0.5:
            os.abort()
        return x.sin()

    TARGET = Target("aborting", fn, "x: n", max_side=4, origin="aborting:TARGET")
''')


def _env(tmp_path: Path, **extra) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(tmp_path)]), **extra)
    env.pop("CI", None)
    return env


def _python(tmp_path: Path, code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path,
                          env=_env(tmp_path), capture_output=True, text=True, timeout=timeout)


def _records(corpus: Path) -> list[Path]:
    return sorted(corpus.glob("*/*/*.json"))


@pytest.fixture
def aborting(tmp_path):
    (tmp_path / "aborting.py").write_text(ABORTING)
    return tmp_path


def test_an_aborting_case_becomes_one_crash_record_that_aborts_on_replay(aborting):
    corpus = aborting / "corpus"
    run = _python(aborting, f'''
        from hypothesis import settings
        from fuzzdiff.config import FuzzConfig
        from fuzzdiff.search.fuzzing import fuzz
        from aborting import TARGET
        fuzz("grad", TARGET, FuzzConfig(corpus={str(corpus)!r}, variants=8, structures=1, timeout=0),
             settings=settings(max_examples=200, derandomize=True, database=None, deadline=None))
        print("no abort")
    ''')
    assert run.returncode == -signal.SIGABRT, (run.returncode, run.stdout, run.stderr[-2000:])
    assert _records(corpus) == []  # nothing was reported before the process died
    assert len(list((corpus / INFLIGHT).glob("*.json"))) == 1

    paths = recover(corpus)

    assert len(paths) == 1 and _records(corpus) == paths
    assert _leftovers(corpus) == []  # the entry is consumed
    assert (corpus / INFLIGHT / ".gitignore").read_text() == "*\n"  # never committed
    record = read_record(paths[0])
    assert record.verdict.kind == "crash" and record.verdict.failed
    assert record.check == "grad" and record.status == "open"
    assert "died while running this case" in record.verdict.message
    (x,), = [record.case.materialize(requires_grad=False).args]  # the trigger is visible in the record
    assert x.shape == (3,) and float(x[0]) > 0.5
    assert recover(corpus) == []  # idempotent

    replay = _python(aborting, f'''
        from fuzzdiff.record.files import read_record
        from fuzzdiff.search.runner import run_check
        from aborting import TARGET
        record = read_record({str(paths[0])!r})
        print(run_check(record.check, TARGET, record.case))
    ''')
    assert replay.returncode == -signal.SIGABRT, (replay.returncode, replay.stdout, replay.stderr[-2000:])


def test_replaying_a_crash_record_runs_it_in_a_child_process(aborting, monkeypatch):
    corpus = aborting / "corpus"
    _python(aborting, f'''
        from hypothesis import settings
        from fuzzdiff.config import FuzzConfig
        from fuzzdiff.search.fuzzing import fuzz
        from aborting import TARGET
        fuzz("grad", TARGET, FuzzConfig(corpus={str(corpus)!r}, variants=8, structures=1, timeout=0),
             settings=settings(max_examples=200, derandomize=True, database=None, deadline=None))
    ''')
    path, = recover(corpus)
    monkeypatch.chdir(aborting)  # where the target's module is importable
    verdict = replay(path)  # in this process it would abort the test run
    assert verdict.kind == "crash" and "SIGABRT" in verdict.message


def test_the_script_of_a_crash_record_is_written_by_a_child_process(aborting):
    """``repro --script`` prints the script; and where writing it kills the
    process (here: the target's module aborts on import), the command itself
    survives and says so (exit 2)."""
    corpus = aborting / "corpus"
    _python(aborting, f'''
        from hypothesis import settings
        from fuzzdiff.config import FuzzConfig
        from fuzzdiff.search.fuzzing import fuzz
        from aborting import TARGET
        fuzz("grad", TARGET, FuzzConfig(corpus={str(corpus)!r}, variants=8, structures=1, timeout=0),
             settings=settings(max_examples=200, derandomize=True, database=None, deadline=None))
    ''')
    path, = recover(corpus)
    cli = [sys.executable, "-m", "fuzzdiff.cli", "repro", str(path), "--script"]
    ok = subprocess.run(cli, cwd=aborting, env=_env(aborting), capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "import torch" in ok.stdout and "os.abort()" in ok.stdout

    (aborting / "aborting.py").write_text("import os\nif os.environ.get('ABORT_ON_IMPORT'):\n"
                                          "    os.abort()\n" + ABORTING)
    dead = subprocess.run(cli, cwd=aborting, env=_env(aborting, ABORT_ON_IMPORT="1"),
                          capture_output=True, text=True, timeout=120)
    assert dead.returncode == 2, (dead.returncode, dead.stderr[-2000:])
    assert "killed the process that wrote it" in dead.stderr and "fuzzdiff repro" in dead.stderr


def test_the_next_fuzz_run_recovers_and_a_live_or_idle_entry_makes_no_record(tmp_path):
    corpus = tmp_path / "corpus"
    case = _drawn_cases(1)[0]
    live = Journal(corpus, "grad", "exp")
    live.begin_case(case)
    live.begin(0)  # in flight in this (live) process
    dead_idle = _fake_dead(corpus, case, variant=-1)
    dead_busy = _fake_dead(corpus, case, variant=2)

    fuzz("grad", "exp", FuzzConfig(corpus=corpus, variants=1, structures=1),
         settings=settings(max_examples=2, database=None, deadline=None))

    (path,) = _records(corpus)
    record = read_record(path)
    assert record.verdict.kind == "crash" and record.case == case.reseeded(2)
    assert live.path.exists() and not dead_idle.exists() and not dead_busy.exists()
    live.close()
    assert not live.path.exists()


def _fake_dead(corpus: Path, case, variant: int) -> Path:
    """A journal entry whose owner is gone: a pid that cannot exist."""
    j = Journal(corpus, "grad", "exp")
    j.begin_case(case)
    if variant >= 0:
        j.begin(variant)
    raw = bytearray(j.path.read_bytes())
    pid = f'"pid": {os.getpid()},'.encode()
    at = raw.index(pid)
    raw[at:at + len(pid)] = f'"pid": {2**22 + 7},'.encode()  # above Linux's pid_max
    path = j.path.with_name(j.path.name.replace(".json", "-dead.json"))
    path.write_bytes(bytes(raw))
    j.close()
    return path


def _drawn_cases(n: int):
    out = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None)
    @given(case_strategy(get_check("alias"), get_target("mul")))
    def draw(case):
        out.append(case)

    draw()
    return out


def test_the_journal_json_reads_back_as_the_same_case():
    cases = _drawn_cases(30)
    assert any(a.alias for c in cases for a in c.args)  # aliasing and views round-trip too
    for case in cases:
        assert case_from_json(json.loads(case_json(case))) == case


def test_a_crashed_xdist_worker_is_recorded_by_the_same_session(aborting):
    corpus = aborting / "corpus"
    (aborting / "test_abort_suite.py").write_text(textwrap.dedent(f'''
        import os
        from hypothesis import settings
        from fuzzdiff.config import FuzzConfig
        from fuzzdiff.search.fuzzing import fuzz
        from aborting import TARGET

        FEW = settings(max_examples=200, derandomize=True, database=None, deadline=None)

        def test_aborting():
            fuzz("grad", TARGET, FuzzConfig(corpus=os.environ["FUZZDIFF_CORPUS"], variants=8, structures=1),
                 settings=FEW)

        def test_fine():  # the session goes on past the crash
            fuzz("grad", "sin", FuzzConfig(corpus=os.environ["FUZZDIFF_CORPUS"], variants=1, structures=1),
                 settings=settings(FEW, max_examples=3))
    '''))
    run = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-q", "-p", "no:cacheprovider", "-p", "fuzzdiff.pytest_plugin",
                          "test_abort_suite.py"], cwd=aborting, capture_output=True, text=True,
                         env=_env(aborting, FUZZDIFF_CORPUS=str(corpus)), timeout=180)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out[-3000:]
    assert "crashed while running" in out and "1 passed" in out, out[-3000:]
    (path,) = _records(corpus)
    assert f"fuzzdiff recorded the case in flight: {path}" in out, out[-3000:]
    record = read_record(path)
    # The controller recovers the entry at once and names the worker; the other
    # worker's next fuzz() may get there first (recovery is safe to race, the
    # first record wins) and name the dead process instead.
    assert record.verdict.kind == "crash"
    assert "xdist worker" in record.verdict.message or f"pid {record.verdict.errors['pid']}" in record.verdict.message
    assert record.case.materialize(requires_grad=False).args[0].shape == (3,)
    assert list((corpus / INFLIGHT).glob("*.json")) == []


@pytest.mark.parametrize("printed, kind", [("timeout\n", "timeout"), ("fail\n", "fail"),
                                           ("", "inconclusive"), ("garbage\n", "inconclusive")])
def test_a_crash_replay_keeps_the_childs_verdict_and_never_invents_a_pass(printed, kind, monkeypatch):
    from fuzzdiff.corpus import repro
    from fuzzdiff.record.format import Record
    from fuzzdiff.verdict import Verdict
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, printed, ""))
    record = Record("x", "grad", _drawn_cases(1)[0], Verdict("crash", "died"), "open", path=Path("x.json"))
    assert repro._replay_isolated(record).kind == kind
