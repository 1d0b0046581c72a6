"""fuzzdiff.guards.torch_state and the runner's use of it: a run that breaks torch's
thread-local state does not fail the runs after it."""

import gc
import subprocess
import sys
from pathlib import Path

import torch
from functorch.compile import aot_function, nop

from fuzzdiff.guards import torch_state
from fuzzdiff.case.case import Arg, Case
from fuzzdiff.search.runner import run_check
from fuzzdiff.targets.target import Target
from fuzzdiff.guards.torch_logs import torch_logs
from fuzzdiff.guards.torch_state import kept, snapshot
from fuzzdiff.case.values import Values

ROOT = Path(__file__).resolve().parents[3]
C = torch.randn(3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


def through_constant(x):
    return x @ C.to(x.dtype)


def _jvp_under_aot_function():
    """torch's own bug: aot_function of jvp over a captured constant fails an
    internal assert and leaves the Autograd keys excluded (torch 2.13)."""
    x, u = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64)
    try:
        aot_function(lambda a, b: torch.func.jvp(through_constant, (a,), (b,)), nop, nop)(x, u)
    except RuntimeError as e:
        return e
    return None


def test_kept_puts_back_a_leaked_dispatch_key_and_says_which():
    before = snapshot()
    with kept() as left:
        guard = torch._C._SetExcludeDispatchKeyGuard(torch._C.DispatchKey.Python, True)
        guard.__enter__()  # entered, never exited: what an exception unwinding past C++ guards leaves
    assert snapshot() == before
    assert "left excluded: Python" in str(left) and "(put back)" in str(left)


def test_kept_puts_back_grad_mode_and_an_open_dual_level():
    with kept() as left:
        torch.set_grad_enabled(False)
        torch.autograd.forward_ad.enter_dual_level()
    assert torch.is_grad_enabled() and torch.autograd.forward_ad._current_level == -1
    assert "grad mode left off" in str(left) and "dual level left open" in str(left)
    with kept() as nothing:
        torch.sin(torch.ones(2))
    assert not nothing


def test_the_aot_function_jvp_cascade_is_contained_and_the_runs_after_it_pass():
    """torch 2.13 breaks every later backward of the process after this
    internal assert, unless the run's state is put back and its frames let go
    within it (a guard in the traceback's frames restores the broken keys when
    it is freed)."""
    target = Target("through_constant", through_constant, "x: n 3", family="user")
    values = Values(seed=3, low=-2.0, high=2.0)
    case = Case("through_constant", (Arg((2, 3), values),), "float64", params={
        "backend": "aot_function", "transform": "jvp", "batch": 2,
        "cotangent": {"seed": 1, "layout": "contiguous", "zeros": 0.0},
        "direction": {"seed": 2, "layout": "contiguous", "zeros": 0.0},
    })
    with torch_logs():  # as fuzz() runs it: a log record kept by the test runner would keep the frames alive
        broken = run_check("compile", target, case)
    assert broken.kind == "fail" and broken.errors.get("internal_assert"), broken
    gc.collect()  # whatever the failed run left behind is freed by now, as it is sooner or later
    grad_case = Case("through_constant", case.args, "float64", params={
        "cotangent": {"seed": 1, "layout": "contiguous", "zeros": 0.0},
        "direction": {"seed": 2, "layout": "contiguous", "zeros": 0.0},
    })
    after = run_check("grad", target, grad_case)
    assert after.kind == "pass", after
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    assert through_constant(x).requires_grad  # the process, not only the check, is whole again


def test_the_bug_itself_still_breaks_an_unguarded_process():
    """The evidence that the test above guards something real: unguarded, the
    same torch call leaves autograd off for the rest of the thread, once the
    frames of its exception are freed. (Run in a child: it breaks its process.)"""
    code = (
        "import gc, torch, tests.unit.guards.test_torch_state as t\n"
        "error = t._jvp_under_aot_function()\n"
        "assert error is not None and 'INTERNAL ASSERT FAILED' in str(error)\n"
        "del error\n"
        "gc.collect()\n"
        "x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)\n"
        "print('autograd', t.through_constant(x).requires_grad)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert "autograd False" in done.stdout, done.stdout + done.stderr[-2000:]


def test_a_change_between_two_runs_of_a_sequence_is_put_back_at_the_next_and_noted():
    """An object of an earlier run, freed late, can change the key sets between
    two runs: the next run finds them as the last one left them."""
    held = []
    before = snapshot()
    noted = torch_state.disturbances()
    with torch_state.run():
        with kept():
            pass
        held.append(torch._C._SetExcludeDispatchKeyGuard(torch._C.DispatchKey.Python, True))
        held[-1].__enter__()  # between the runs, as a freed guard does
        assert snapshot() != before
        with kept():
            assert snapshot() == before  # the run itself is clean
    assert snapshot() == before
    assert torch_state.disturbances() == noted + 1
    assert "between two runs" in torch_state.last_disturbance() and "Python" in torch_state.last_disturbance()
