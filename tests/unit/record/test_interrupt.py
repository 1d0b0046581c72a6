"""Stopping a run is not a crash (fuzzdiff.record.journal).

The in-flight journal turns the case of a process that died mid-example into
a ``crash`` record. A process stopped on purpose (SIGTERM from a cancelled CI
job or a cluster scheduler, Ctrl-C, the campaign's own shutdown) was
interrupted, not crashed: it must leave no journal entry behind, so that no
later ``recover()`` writes a crash record that does not reproduce. A process
that really dies (a segfault, SIGKILL from the out-of-memory killer,
``os._exit``) still leaves its entry, and its case still becomes a record.

The tests run fuzzdiff in a subprocess on a target from a module written to a
temporary directory, and stop it while an example is in flight.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import fuzzdiff
from fuzzdiff.record.journal import HEADER, IDLE, INFLIGHT, recover

REPO = Path(fuzzdiff.__file__).resolve().parents[1]

TARGETS = textwrap.dedent('''
    import ctypes
    import os
    import signal
    import time
    from fuzzdiff.targets.target import Target

    def sluggish(x):
        time.sleep(0.2)
        return x.sin()

    def dies(x):
        """Dies as $DIE_BY says at its first example, in the middle of it."""
        how = os.environ["DIE_BY"]
        if how == "segfault":
            ctypes.string_at(0)
        elif how == "exit":
            os._exit(3)
        else:
            os.kill(os.getpid(), getattr(signal, how))
            time.sleep(30)
        return x.sin()

    SLUGGISH = Target("sluggish", sluggish, "x: n", origin="fd_interrupt_targets:SLUGGISH", max_side=3)
    DIES = Target("dies", dies, "x: n", origin="fd_interrupt_targets:DIES", max_side=3)
''')


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "fd_interrupt_targets.py").write_text(TARGETS)
    return tmp_path


def _env(folder: Path, **extra) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(folder)]), **extra)
    env.pop("CI", None)
    return env


def _start(folder: Path, argv: list[str], **env) -> subprocess.Popen:
    """In a session of its own, so that a signal can go to the whole process group."""
    return subprocess.Popen(argv, cwd=folder, env=_env(folder, **env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _in_flight(corpus: Path) -> list[dict]:
    """The journal entries with an example running now."""
    out = []
    for entry in (corpus / INFLIGHT).glob("*.json"):
        try:
            raw = entry.read_bytes()
        except FileNotFoundError:
            continue
        if len(raw) > HEADER and raw[:HEADER] != IDLE:
            out.append(json.JSONDecoder().raw_decode(raw[HEADER:].decode())[0])
    return out


def _wait_in_flight(corpus: Path, proc: subprocess.Popen, n: int = 1, seconds: float = 180) -> list[dict]:
    """The entries once ``n`` processes are in the middle of an example."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        entries = _in_flight(corpus)
        if len(entries) >= n:
            return entries
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    out, err = proc.communicate()
    pytest.fail(f"no example was ever in flight (exit {proc.returncode}):\n{out[-2000:]}\n{err[-2000:]}")


def _entries(corpus: Path) -> list[Path]:
    return sorted((corpus / INFLIGHT).glob("*.json"))


def _records(corpus: Path) -> list[Path]:
    return sorted(corpus.glob("*/*/*.json"))


def _run_argv(corpus: Path, target: str = "SLUGGISH", checks: tuple[str, ...] = ("grad",)) -> list[str]:
    """``fuzzdiff run`` of the temporary module's ``target``, one worker per check."""
    code = ("import sys, fd_interrupt_targets\n"
            "from fuzzdiff import cli\n"
            "from fuzzdiff.commands import run\n"
            "from fuzzdiff.checks import get_check\n"
            f"pairs = [(fd_interrupt_targets.{target}, get_check(c)) for c in {list(checks)!r}]\n"
            "run._select_pairs = lambda args, notes=None: pairs\n"
            f"sys.exit(cli.main(['run', '--jobs', '{len(checks)}', '--max-examples', '1000', '--db', '',"
            f" '--batch-seconds', '600', '--corpus', {str(corpus)!r}]))\n")
    return [sys.executable, "-c", code]


def test_sigterm_to_the_whole_process_group_of_a_run_leaves_no_crash_record(folder):
    """A cancelled CI job or ``kill -TERM -PGID``: the workers get the signal too,
    and may be gone before the campaign stops them itself."""
    corpus = folder / "corpus"
    proc = _start(folder, _run_argv(corpus, checks=("grad", "layout")))
    _wait_in_flight(corpus, proc, n=2)
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert _entries(corpus) == []
    assert recover(corpus) == [] and _records(corpus) == []


def test_a_worker_stopped_alone_is_not_a_crash(folder):
    """SIGTERM to one worker (by hand, or by a scheduler): its batch ends, the
    run goes on, and nothing is recorded."""
    corpus = folder / "corpus"
    proc = _start(folder, _run_argv(corpus))
    (entry,) = _wait_in_flight(corpus, proc)
    assert entry["pid"] != proc.pid
    os.kill(entry["pid"], signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert "crash record" not in out + err and "died" not in out
    assert _entries(corpus) == [] and recover(corpus) == [] and _records(corpus) == []


def test_sigterm_to_the_check_command_is_an_interruption(folder):
    corpus = folder / "corpus"
    proc = _start(folder, [sys.executable, "-m", "fuzzdiff", "check", "fd_interrupt_targets:sluggish",
                           "--spec", "x: n", "--checks", "grad", "--max-examples", "1000",
                           "--corpus", str(corpus)])
    _wait_in_flight(corpus, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted" in err, (proc.returncode, err[-2000:])
    assert _entries(corpus) == [] and recover(corpus) == [] and _records(corpus) == []


SUITE = textwrap.dedent('''
    import os
    from hypothesis import settings
    from fuzzdiff.config import FuzzConfig
    from fuzzdiff.search.fuzzing import fuzz
    from fd_interrupt_targets import SLUGGISH

    def test_sluggish():
        fuzz("grad", SLUGGISH, FuzzConfig(corpus=os.environ["FUZZDIFF_CORPUS"], variants=1, structures=1, timeout=0),
             settings=settings(max_examples=1000, database=None, deadline=None))
''')


@pytest.mark.parametrize("xdist", [["-p", "no:xdist"], ["-n", "1"]], ids=["plain", "xdist"])
def test_sigterm_to_a_pytest_session_leaves_no_crash_record(folder, xdist):
    corpus = folder / "corpus"
    (folder / "test_sluggish_suite.py").write_text(SUITE)
    proc = _start(folder, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "fuzzdiff.pytest_plugin", *xdist, "test_sluggish_suite.py"],
                  FUZZDIFF_CORPUS=str(corpus))
    _wait_in_flight(corpus, proc)
    os.killpg(proc.pid, signal.SIGTERM)
    proc.communicate(timeout=120)
    assert _entries(corpus) == [] and recover(corpus) == [] and _records(corpus) == []


FUZZ_DIES = ("import signal\n"
             "for sig in (signal.SIGTERM, signal.SIGHUP):  # as in a shell, even one under nohup\n"
             "    signal.signal(sig, signal.SIG_DFL)\n"
             "from hypothesis import settings\n"
             "from fuzzdiff.config import FuzzConfig\n"
             "from fuzzdiff.search.fuzzing import fuzz\n"
             "from fd_interrupt_targets import DIES\n"
             "fuzz('grad', DIES, FuzzConfig(corpus='corpus', variants=1, structures=1, timeout=0),\n"
             "     settings=settings(max_examples=5, database=None, deadline=None))\n")


@pytest.mark.parametrize("how, status", [("SIGTERM", -signal.SIGTERM), ("SIGHUP", -signal.SIGHUP),
                                         ("SIGKILL", -signal.SIGKILL), ("segfault", -signal.SIGSEGV),
                                         ("exit", 3)])
def test_only_a_process_that_really_died_leaves_a_crash_record(folder, how, status):
    """A stop request is handled, and the process still dies of it, as it would
    without fuzzdiff; any other death leaves the entry that becomes the record."""
    corpus = folder / "corpus"
    run = subprocess.run([sys.executable, "-c", FUZZ_DIES], cwd=folder, env=_env(folder, DIE_BY=how),
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == status, (run.returncode, run.stderr[-2000:])
    if how in ("SIGTERM", "SIGHUP"):
        assert _entries(corpus) == [] and recover(corpus) == [] and _records(corpus) == []
    else:
        assert len(_entries(corpus)) == 1
        (path,) = recover(corpus)
        assert json.loads(path.read_text())["verdict"]["kind"] == "crash"
        assert _entries(corpus) == []


def test_a_worker_that_segfaults_in_a_run_is_a_crash_record(folder):
    corpus = folder / "corpus"
    run = subprocess.run(_run_argv(corpus, "DIES"), cwd=folder, env=_env(folder, DIE_BY="segfault"),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr[-2000:]
    (path,) = _records(corpus)
    record = json.loads(path.read_text())
    assert record["verdict"]["kind"] == "crash" and "SIGSEGV" in record["verdict"]["message"]
    assert record["target"] == "fd_interrupt_targets:DIES"
    assert _entries(corpus) == []


def test_the_stop_handler_is_installed_only_while_a_journal_is_open(tmp_path):
    from fuzzdiff.record.journal import Journal, _on_stop

    before = {sig: signal.signal(sig, signal.SIG_DFL) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        first, second = Journal(tmp_path, "grad", "sin"), Journal(tmp_path, "grad", "sin")
        assert signal.getsignal(signal.SIGTERM) is _on_stop and signal.getsignal(signal.SIGHUP) is _on_stop
        first.close()
        assert signal.getsignal(signal.SIGTERM) is _on_stop  # the other one is still open
        second.close()
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL == signal.getsignal(signal.SIGHUP)

        def mine(signum, frame):
            pass

        signal.signal(signal.SIGTERM, mine)  # someone else's handler is theirs
        Journal(tmp_path, "grad", "sin").close()
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


DIES_AS_CHILD = ("import os, sys\n"
                 "from fuzzdiff.record.journal import Journal\n"
                 "j = Journal(sys.argv[1], 'grad', 'sin')\n"
                 "j.begin_case({'target': 'sin'})\n"
                 "j.begin(0)\n"
                 "os._exit(1)\n")


def test_an_interrupted_pytest_session_forgets_its_killed_workers_cases(tmp_path):
    """xdist kills a worker that did not stop within its timeout (stuck in a
    C call when Ctrl-C came): the controller forgets the entries of its own
    dead children, and only theirs."""
    from fuzzdiff.record.journal import forget

    corpus = tmp_path / "corpus"
    env = _env(tmp_path)
    subprocess.run([sys.executable, "-c", DIES_AS_CHILD, str(corpus)], env=env, check=False)
    grandchild = f"{sys.executable} -c \"$CODE\" {corpus}; true"  # a shell in between: not our child
    subprocess.run(["sh", "-c", grandchild], env={**env, "CODE": DIES_AS_CHILD}, check=False)
    assert len(_entries(corpus)) == 2
    (ours,) = [e for e in _entries(corpus)
               if json.JSONDecoder().raw_decode(e.read_bytes()[HEADER:].decode())[0]["parent"] == os.getpid()]
    assert forget(corpus, children_of=os.getpid()) == [ours]
    assert _entries(corpus) != [] and not ours.exists()  # the other dead process's entry is recovery's
