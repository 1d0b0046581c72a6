"""A function that draws random numbers without saying so is found by calling
it (fuzzdiff.search.random_calls) and checked seeded alike, never judged on noise.

Unseeded, finite differences of a random function are noise, and their error
estimate (the change when the step doubles) grows with it: a wrong backward
hides behind it. Seeded alike before every call, the function is
deterministic again and its derivatives are judged as any other's.
"""

import os
import random
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.unit.fdhelpers import WRONG_SQUARE

import fuzzdiff
from fuzzdiff.case.case import Arg, Case
from fuzzdiff.checks import CHECKS
from fuzzdiff.config import FuzzConfig
from fuzzdiff.record.files import read_record
from fuzzdiff.case.layout import Layout
from fuzzdiff.search.random_calls import SEEDED, SELF_SEEDED, UNSEEDABLE, UNSEEDABLE_WARNING, with_randomness
from fuzzdiff.corpus.repro import replay
from fuzzdiff.search.runner import RANDOM_LOW_PRECISION_ON_CUDA, RANDOM_STRIDED_ON_CUDA, run_check
from fuzzdiff.targets import get_target
from fuzzdiff.targets.user import user_target
from fuzzdiff.case.values import Values

REPO = Path(fuzzdiff.__file__).resolve().parents[1]

RANDOM_OPS = WRONG_SQUARE + '''
import random

import numpy as np
import torch.nn.functional as F


def dropout_square_wrong(x):
    return F.dropout(WrongSquare.apply(x), 0.5, training=True)


def dropout_right(x):
    return F.dropout(x, 0.5, training=True) * x.sin()


def python_random(x):
    return x * (1.0 + random.random())


def numpy_random(x):
    return x.exp() * float(np.random.uniform(0.5, 2.0))


PRIVATE = torch.Generator().manual_seed(0)


def private_generator(x):
    return x * torch.rand(x.shape, generator=PRIVATE, dtype=x.dtype).to(x.device)


def random_projections(x):
    """A sliced distance's projections, drawn from a generator seeded in every call."""
    generator = torch.Generator().manual_seed(0)
    projections = torch.randn(x.shape[-1], 8, generator=generator, dtype=x.dtype)
    return (x @ projections).sort(dim=-1).values.pow(2).mean()


def rounding_jitter(x):
    """Differs between calls by at most an ulp: not randomness."""
    return x * (1.0 + torch.finfo(x.dtype).eps * random.random())


def monte_carlo(a):
    """torchquad's MonteCarlo: the mean of sin(3 a u) over 64 points u drawn in a's dtype."""
    generator = torch.Generator().manual_seed(0)
    u = torch.rand(64, generator=generator, dtype=a.dtype)
    return torch.sin(a[..., None] * u * 3).mean(-1)
'''


@pytest.fixture
def ops(importable):
    return importable("fd_random_ops", RANDOM_OPS)


def test_a_random_function_with_a_wrong_backward_fails_at_the_defaults(ops):
    """Unseeded, this passed: the finite differences' noise estimate swallowed the wrong gradient."""
    report = fuzzdiff.check(ops.dropout_square_wrong, "x: n m", checks=["grad"], seed=0)
    assert report.target.random
    assert [f.check for f in report.failures] == ["grad"], report.summary()
    assert "vs finite differences" in report.failures[0].message
    assert any(SEEDED in text for text in report.warnings)


def test_an_undeclared_dropout_with_a_right_gradient_passes_every_check(ops):
    report = fuzzdiff.check(ops.dropout_right, "x: n m", max_examples=30, seed=0)
    assert report.ok, report.summary()
    assert report.tallies["grad"].counts["pass"] > 0 and report.tallies["grad"].counts["inconclusive"] == 0
    for name in ("dtype", "layout", "vmap", "compile"):  # they would compare other draws
        assert report.tallies[name].only_unsupported, name
    assert "random: outputs differ between calls on the same inputs; every call is seeded alike" in report.summary()


@pytest.mark.parametrize("name", ["python_random", "numpy_random", "dropout_right"])
def test_draws_of_python_numpy_and_torch_are_found_and_the_callers_generators_kept(ops, name):
    torch_state, python_state, numpy_state = torch.get_rng_state(), random.getstate(), np.random.get_state()
    with pytest.warns(UserWarning, match="fuzzdiff: random: outputs differ"):
        target = with_randomness(user_target(getattr(ops, name), "x: n"))
    assert target.random and "dtype" in target.skip
    assert torch.equal(torch.get_rng_state(), torch_state) and random.getstate() == python_state
    assert np.array_equal(np.random.get_state()[1], numpy_state[1])
    # (without the hard values: exp past its overflow point is rightly inconclusive, not a randomness question)
    report = fuzzdiff.check(getattr(ops, name), "x: n m", checks=["grad", "forward", "gradgrad"],
                            max_examples=20, seed=0, structured=())
    assert report.ok and report.tallies["grad"].counts["inconclusive"] == 0, report.summary()


def test_rounding_level_differences_and_deterministic_functions_are_not_random(ops):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for fn in (ops.rounding_jitter, torch.sin):
            target = user_target(fn, "x: n m")
            assert with_randomness(target) is target


def test_a_generator_the_function_seeds_itself_is_random_for_dtype_though_two_calls_agree(ops):
    """float32 and float64 draw other numbers from one seed: the dtype check compared two
    different functions and reported the difference as confirmed."""
    with pytest.warns(UserWarning, match="draws random numbers \\(randn\\) from a generator it seeds itself"):
        target = with_randomness(user_target(ops.random_projections, "x: n m"))
    assert target.random and "dtype" in target.skip and "float32 and float64" in target.skip["dtype"]
    report = fuzzdiff.check(ops.random_projections, "x: n m", checks=["grad", "dtype"], max_examples=10, seed=0)
    assert report.ok and report.row("grad")["passed"] > 0, report.summary()
    assert report.tallies["dtype"].only_unsupported
    assert SELF_SEEDED.partition("{ops}")[0] in report.summary()


def test_randomness_that_seeding_does_not_fix_leaves_the_checks_unsupported_with_why(ops):
    report = fuzzdiff.check(ops.private_generator, "x: n m", checks=["grad", "gradgrad", "mutation"],
                            max_examples=10, seed=0)
    assert report.ok and not report.target.random
    for name in ("grad", "gradgrad"):
        assert report.tallies[name].only_unsupported and report.tallies[name].reasons["unsupported"] == UNSEEDABLE
    assert report.row("mutation")["passed"] > 0  # it watches the inputs, not two calls
    assert report.warnings[f"UserWarning: {UNSEEDABLE_WARNING}"] == 1


def test_a_module_with_dropout_in_training_mode_is_checked_seeded_not_refused():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Dropout(0.5), torch.nn.Tanh())
    report = fuzzdiff.check(model, "x: b 3", checks=["grad", "gradgrad", "per_sample"], dtypes=[torch.float64],
                            max_examples=20, seed=0)
    assert report.ok and report.target.random, report.summary()
    assert report.row("grad")["passed"] > 0 and report.tallies["grad"].counts["inconclusive"] == 0
    assert "batch draws other numbers" in report.tallies["per_sample"].reasons["unsupported"]


def test_a_record_of_a_random_function_replays_seeded_and_its_script_seeds_every_call(ops, tmp_path):
    report = fuzzdiff.check(ops.dropout_square_wrong, "x: n m", checks=["grad"], seed=0, corpus=tmp_path / "c")
    path = report.failures[0].record_path
    record = read_record(path)
    assert record.definition["random"] is True and replay(record).failed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path)])}
    done = subprocess.run([sys.executable, "-m", "fuzzdiff", "repro", str(path)], capture_output=True, text=True,
                          cwd=tmp_path, env=env)
    assert done.returncode == 1 and "reproduced" in done.stdout, done.stdout + done.stderr
    script = subprocess.run([sys.executable, "-m", "fuzzdiff", "repro", str(path), "--script"], capture_output=True,
                            text=True, cwd=tmp_path, env=env)
    assert "torch.manual_seed(" in script.stdout and "random.seed(" in script.stdout, script.stderr
    (tmp_path / "repro_random.py").write_text(script.stdout)
    ran = subprocess.run([sys.executable, "-I", str(tmp_path / "repro_random.py")], capture_output=True, text=True,
                         cwd=tmp_path.parent, timeout=120)
    assert ran.returncode == 1 and ran.stdout.splitlines()[-1].startswith("MISMATCH: "), ran.stdout + ran.stderr


def _sleeps(x):
    time.sleep(3)
    return x


def test_a_function_that_hangs_is_not_held_up_by_asking_whether_it_is_random():
    """Its calls run under the per-example timeout: the check reports the hang, at once."""
    start = time.perf_counter()
    report = fuzzdiff.check(_sleeps, "x: n", checks=["grad"], max_examples=1, seed=0,
                            config=FuzzConfig(timeout=0.5), shrink_seconds=0,
                            isolate=False)  # the calls' limit, not the fresh rerun's confirmation of a hang
    assert [f.check for f in report.failures] == ["grad"] and "did not finish" in report.failures[0].message
    assert time.perf_counter() - start < 10  # six unlimited probe calls alone would take 18 s


@pytest.mark.parametrize("name", ["dropout_training", "rrelu_training"])
def test_random_layers_are_not_compared_across_devices_dtypes_or_layouts_on_cuda(name):
    """CUDA's generator draws other numbers than the CPU's, and on CUDA one seed
    gives a float32 and a float64 run, or a strided input and its dense copy,
    other draws: such comparisons would be between two functions."""
    target = get_target(name)
    assert "CUDA's generator" in CHECKS["device"].why_not(target)
    kwargs = {"p": 0.5} if name == "dropout_training" else {}
    low = Case(name, (Arg((3,), Values(seed=1)),), dtype="float32", device="cuda", kwargs=kwargs)
    gapped = Case(name, (Arg((3,), Values(seed=1), Layout(5, (2,), 0)),), dtype="float64", device="cuda",
                  kwargs=kwargs)
    # decided before the case is made: no GPU needed
    assert run_check("grad", target, low).message == RANDOM_LOW_PRECISION_ON_CUDA
    assert run_check("grad", target, gapped).message == RANDOM_STRIDED_ON_CUDA


def test_a_self_seeded_draw_is_unsupported_by_the_dtype_check_even_where_nobody_asked(ops):
    """The randomness question may run past its part of a short budget (a library's first
    call imports half of it): then the dtype check's own failure is asked whether it draws."""
    from fuzzdiff.case.case import Arg, Case
    from fuzzdiff.case.values import Values
    from fuzzdiff.search.runner import verdict_at

    target = user_target(ops.random_projections, "x: n m")
    assert not target.random  # not asked
    case = Case(target.ref, (Arg((5, 3), Values(seed=1)),), "float32", params={"cotangent": {"seed": 1}})
    verdict = verdict_at(CHECKS["dtype"], target, case)
    assert verdict.kind == "unsupported" and "(here: randn)" in verdict.message, verdict


def test_float64_is_no_reference_for_float32_where_the_function_draws_other_numbers_in_each(ops):
    """A Monte Carlo integral of its own seeded draws: float32's derivatives are
    right for float32's points, float64's for other points. Judged against
    float64, float32 failed "confirmed"; it is inconclusive, saying why."""
    report = fuzzdiff.check(ops.monte_carlo, "a: n", checks=["grad"], dtypes=[torch.float32], max_examples=20, seed=0)
    assert report.ok, report.summary()
    assert any("draws other numbers" in why for (kind, why) in report.tallies["grad"].why), report.summary()
