"""A hanging example becomes a ``timeout`` record, not a stuck suite (fuzzdiff.guards.timeout).

Soft layer: a Python loop (even inside ``except Exception``) is interrupted
in-process, reported once without shrinking, and the run goes on. Hard layer:
a C call that holds the GIL with SIGALRM blocked cannot be interrupted at
all; the process is stopped and the journal entry becomes a timeout record.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time
import weakref
from pathlib import Path

import pytest
import torch
from hypothesis import settings

import fuzzdiff
from fuzzdiff.record.files import read_record
from fuzzdiff.search.fuzzing import FuzzFailure, fuzz
from fuzzdiff.record.journal import INFLIGHT, recover
from fuzzdiff.targets import Target
from fuzzdiff.config import ConfigError, FuzzConfig
from fuzzdiff.guards.timeout import ExampleTimeout, _swallowed, limited

REPO = Path(fuzzdiff.__file__).resolve().parents[1]


def _leftovers(corpus: Path) -> list[Path]:
    """Journal entries and hang files: what recovery must consume."""
    return sorted(p for p in (corpus / INFLIGHT).glob("*") if p.suffix in (".json", ".hang"))
FEW = settings(max_examples=100, derandomize=True, database=None, deadline=None)


def spin_at_three(x):
    if x.shape[0] == 3:
        try:
            while True:  # a pure-Python hang, behind the kind of guard targets have
                pass
        except Exception:
            return x
    return x.sin()


SPIN = Target("spin_at_three", spin_at_three, "x: n", max_side=4)


def test_a_hanging_example_is_one_timeout_record_and_the_run_goes_on(tmp_path):
    calls = []
    target = Target("spin_counted", lambda x: (calls.append(x.shape), spin_at_three(x))[1], "x: n",
                    max_side=4)
    fuzz("grad", SPIN, FuzzConfig(variants=1, structures=1, timeout=0, case_options={"max_side": 2}),
         settings=FEW)  # warm-up outside the timeout
    start = time.monotonic()
    with pytest.raises(FuzzFailure) as info:
        fuzz("grad", target, FuzzConfig(corpus=tmp_path, variants=2, structures=1, timeout=2), settings=FEW)
    assert time.monotonic() - start < 15

    failure = info.value
    assert failure.verdict.kind == "timeout" and failure.verdict.failed
    assert failure.case.args[0].shape == (3,)
    assert failure.tally.counts["timeout"] == 1 and failure.tally.counts["pass"] > 0
    assert sum(1 for s in calls if s == (3,)) == 1  # reported once: not replayed, not shrunk
    record = read_record(failure.record_path)
    assert record.verdict.kind == "timeout" and record.status == "open"
    assert record.case == failure.case
    assert _leftovers(tmp_path) == []
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL  # handler restored

    # The run goes on: the next fuzzing in this process is unaffected.
    tally = fuzz("grad", SPIN, FuzzConfig(variants=2, structures=1, timeout=2, case_options={"max_side": 2}),
                 settings=FEW)
    assert tally.counts["pass"] > 0 and tally.counts["timeout"] == 0


def test_timeout_zero_disables_and_the_setting_is_validated():
    assert FuzzConfig.resolve({"FUZZDIFF_TIMEOUT": "0"}).timeout == 0
    with pytest.raises(ConfigError, match="FUZZDIFF_TIMEOUT"):
        FuzzConfig.resolve({"FUZZDIFF_TIMEOUT": "soon"})
    assert FuzzConfig.resolve({}).timeout == 60
    with pytest.raises(ValueError, match="timeout"):
        FuzzConfig(timeout=-1)
    assert issubclass(ExampleTimeout, BaseException) and not issubclass(ExampleTimeout, Exception)


def test_limited_stops_one_call_outside_fuzz():
    start = time.monotonic()
    with pytest.raises(ExampleTimeout):
        with limited(0.3):
            spin_at_three(torch.zeros(3))
    assert time.monotonic() - start < 5
    with limited(5):
        assert spin_at_three(torch.zeros(2)).shape == (2,)
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL


STUCK_IN_C = textwrap.dedent('''
    import ctypes, signal
    from fuzzdiff.targets import Target

    def fn(x):
        if x.shape[0] == 3:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            ctypes.PyDLL(None).sleep(1000)  # one C call, holding the GIL, deaf to SIGALRM
        return x.sin()

    TARGET = Target("stuck_in_c", fn, "x: n", max_side=4)
''')


def test_a_hang_inside_one_c_call_stops_the_process_and_becomes_a_timeout_record(tmp_path):
    (tmp_path / "stuck.py").write_text(STUCK_IN_C)
    corpus = tmp_path / "corpus"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(tmp_path)]))
    code = textwrap.dedent(f'''
        import time
        from hypothesis import settings
        from fuzzdiff.config import FuzzConfig
        from fuzzdiff.search.fuzzing import fuzz
        from stuck import TARGET
        few = settings(max_examples=100, derandomize=True, database=None, deadline=None)
        # warm: no 1 s first example
        fuzz("grad", TARGET, FuzzConfig(variants=1, structures=1, timeout=0, case_options={{"max_side": 2}}), settings=few)
        start = time.monotonic()
        try:
            fuzz("grad", TARGET, FuzzConfig(corpus={str(corpus)!r}, variants=2, structures=1, timeout=1), settings=few)
        finally:
            print("fuzz returned after", time.monotonic() - start)
    ''')
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "fuzz returned" not in run.stdout, (  # stopped, not returned
        run.returncode, run.stdout, run.stderr[-2000:])
    (hang,) = (corpus / INFLIGHT).glob("*.hang")
    assert hang.read_text().startswith("Timeout")

    (path,) = recover(corpus)

    record = read_record(path)
    assert record.verdict.kind == "timeout" and record.check == "grad"
    assert "hard timeout stopped the process" in record.verdict.message
    assert "stuck.py" in record.verdict.message  # the innermost frame names the target
    assert record.case.args[0].shape == (3,)
    assert _leftovers(corpus) == []


def test_an_alarm_in_a_weak_references_callback_waits_for_a_frame_that_can_raise():
    """A WeakValueDictionary drops an entry in a callback where its value dies:
    an OutOfTime raised there would be printed as unraisable and lost (a
    budget's end missed, the work running on), so the alarm comes again."""
    frames = []

    def watch(frame, event, arg):
        if event == "call" and frame.f_code.co_filename == weakref.__file__ and frame.f_code.co_name == "remove":
            frames.append(frame)

    class Value:
        pass

    table, value = weakref.WeakValueDictionary(), Value()
    table["k"] = value
    sys.setprofile(watch)
    try:
        del value
    finally:
        sys.setprofile(None)
    assert frames and _swallowed(frames[0])
    assert not _swallowed(sys._getframe())
