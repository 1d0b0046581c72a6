"""The device check (cuda vs cpu) and CUDA cases, tested without a GPU.

The judging runs with the path as a parameter: cpu against cpu must pass, a
perturbed second side must fail, a side that is off but no further from
float64 than the CPU, or that changes on replay, is inconclusive. The real
path is exercised up to the device boundary (the move to cuda). On a machine
with a GPU the real check runs too; elsewhere those tests skip.
"""

import pytest
import torch
from hypothesis import HealthCheck, find, settings

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.checks import CHECKS, device
from fuzzdiff.search.fuzzing import fuzz
from fuzzdiff.targets import get_target
from fuzzdiff.targets.target import Target
from fuzzdiff.case.values import Probe, Values
from fuzzdiff.config import FuzzConfig
from strategies.cases import cases

CUDA = torch.cuda.is_available()
SIN = get_target("sin")
SUM = Target("unit_sum_sq", lambda x: (x * x).sum(dim=-1), "x: n m")


def _case(target=SUM, dtype="float32", shape=(3, 5)):
    return Case(target.ref, (Arg(shape, Values(seed=11, low=-2.0, high=2.0)),), dtype,
                params={"cotangent": Probe(seed=4).__dict__.copy()})


def _fake(perturb_cpu=0.0, perturb_other=0.0, noisy=False):
    """The real path on the CPU for every device name, moved by a relative
    ``perturb`` per side (the float64 reference is never moved)."""
    calls = []

    def run(target, case, dev, cast=None):
        names, tensors = device.evaluate_on(target, case, "cpu", cast)
        calls.append((dev, cast))
        if cast is None:
            shift = perturb_cpu if dev == "cpu" else perturb_other
            if noisy and dev != "cpu":
                shift = shift * (1 + len(calls))
            tensors = [t + shift * (1 + t.abs()) for t in tensors]
        return names, tensors

    run.calls = calls
    return run


def test_the_check_is_registered_and_skips_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert CHECKS["device"] is device.CHECK
    assert device.CHECK.why_not(SIN) == "no CUDA device"
    tally = fuzz("device", SIN, FuzzConfig(variants=4, structures=1), settings=settings(max_examples=3, database=None))
    assert tally.counts == {"unsupported": 1} and tally.reasons["unsupported"] == "no CUDA device"


def test_same_results_on_both_sides_pass():
    run = _fake()
    assert device.compare_devices(SUM, _case(), "fake", run=run).kind == "pass"
    assert [d for d, _ in run.calls] == ["cpu", "fake"]


def test_a_perturbed_device_side_fails_with_the_float64_comparison():
    run = _fake(perturb_other=1e-2)
    v = device.compare_devices(SUM, _case(), "fake", run=run)
    assert v.kind == "fail", v
    assert "fake vs cpu" in v.message and "vs_float64" in v.errors
    assert ("cpu", torch.float64) in run.calls  # judged against a float64 CPU run


def test_a_mismatch_that_vanishes_at_a_neighbouring_point_is_inconclusive():
    """As at a relu kink, where cuDNN and the CPU took different one-sided
    derivatives (nn.RNN, relu, a pre-activation of exactly 0, on an H100)."""
    def run(target, case, dev, cast=None):
        names, tensors = device.evaluate_on(target, case, "cpu", cast)
        at_the_kink = all(a.values.nudge == 0 for a in case.args)
        if dev != "cpu" and cast is None and at_the_kink:
            tensors = [t + 1e-2 * (1 + t.abs()) for t in tensors]
        return names, tensors

    v = device.compare_devices(SUM, _case(), "fake", run=run)
    assert v.kind == "inconclusive" and "vanishes at a neighbouring point" in v.message, v


def test_float64_cases_fail_on_a_small_shift_too():
    v = device.compare_devices(SUM, _case(dtype="float64"), "fake", run=_fake(perturb_other=1e-6))
    assert v.kind == "fail", v


def test_both_sides_as_far_from_float64_is_inconclusive():
    v = device.compare_devices(SUM, _case(), "fake", run=_fake(perturb_cpu=5e-3, perturb_other=-5e-3))
    assert v.kind == "inconclusive" and "no further from a float64" in v.message, v


def test_a_device_side_that_changes_on_replay_is_inconclusive():
    v = device.compare_devices(SUM, _case(), "fake", run=_fake(perturb_other=1e-2, noisy=True))
    assert v.kind == "inconclusive" and "nondeterministic" in v.message, v


def test_evaluate_on_cpu_is_the_eager_path_and_brings_gradients_back():
    names, tensors = device.evaluate_on(SUM, _case(), "cpu")
    assert names == ["output 0", "grad 0"]
    x = _case().materialize().leaves[0]
    assert torch.equal(tensors[0], (x * x).sum(-1).detach())
    assert tensors[1].shape == (3, 5) and tensors[1].device.type == "cpu"


@pytest.mark.skipif(CUDA, reason="checks the failure without a GPU")
def test_evaluate_on_cuda_really_moves_the_case_to_the_device():
    with pytest.raises((AssertionError, RuntimeError), match="CUDA|cuda"):
        device.evaluate_on(SUM, _case(), "cuda")


def test_cases_draw_the_device_among_those_given():
    opts = settings(max_examples=500, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    assert find(cases(SIN, devices=("cpu", "cuda")), lambda c: c.device == "cuda", settings=opts).device == "cuda"
    assert find(cases(SIN, devices=("cuda",)), lambda c: True, settings=opts).device == "cuda"


def test_cases_stay_on_cpu_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    opts = settings(max_examples=200, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    with pytest.raises(Exception, match="No examples found|Could not find"):
        find(cases(SIN), lambda c: c.device != "cpu", settings=opts)


def test_a_cpu_only_target_never_draws_a_cuda_case(monkeypatch):
    from hypothesis.errors import InvalidArgument

    from fuzzdiff.campaign.loop import case_options
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    pinned = Target("unit_cpu_only", torch.sin, "x: n", cpu_only="its CUDA kernel faults")
    opts = settings(max_examples=200, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    assert pinned.devices == ("cpu",) and SIN.devices == ("cpu", "cuda")
    assert find(cases(SIN), lambda c: c.device == "cuda", settings=opts).device == "cuda"
    with pytest.raises(Exception, match="No examples found|Could not find"):
        find(cases(pinned), lambda c: c.device != "cpu", settings=opts)
    with pytest.raises(InvalidArgument, match="unit_cpu_only.*its CUDA kernel faults"):
        cases(pinned, devices=("cuda:0",))
    assert "its CUDA kernel faults" in device.CHECK.why_not(pinned)
    assert case_options(pinned, CHECKS["grad"], device="cuda") is None
    assert case_options(pinned, CHECKS["grad"], device="cpu") == {"devices": ("cpu",)}


@pytest.mark.skipif(not CUDA, reason="no CUDA device")
def test_cuda_and_cpu_agree_on_sin():
    assert device.compare_devices(SIN, _case(SIN), "cuda").kind == "pass"
    tally = fuzz("device", SIN, FuzzConfig(variants=4, structures=1),
                 settings=settings(max_examples=10, database=None, deadline=None))
    assert tally.counts["pass"] > 0


@pytest.mark.skipif(not CUDA, reason="no CUDA device")
def test_other_checks_run_on_cuda_cases():
    tally = fuzz("grad", SIN, FuzzConfig(variants=4, structures=1, case_options={"devices": ("cuda",)}),
                 settings=settings(max_examples=10, database=None, deadline=None))
    assert tally.counts["pass"] > 0


def test_checks_run_without_tf32_when_a_gpu_is_present(monkeypatch):
    """Also where torch.testing's common_utils (imported by the OpInfo adapter)
    has forbidden assigning cuDNN flags."""
    import torch.testing._internal.common_utils  # noqa: F401 - disables global flag assignment

    from fuzzdiff.search import runner
    from fuzzdiff.checks.check import Check
    from fuzzdiff.verdict import Verdict
    seen = []

    def run(target, case):
        seen.append((torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32))
        return Verdict("pass")

    probe = Check("unit_tf32", run)
    # Assigned and restored by hand: the cuBLAS flag is a module property, which
    # monkeypatch (pytest >= 9.2) takes for a missing attribute and deletes on undo.
    matmul = torch.backends.cuda.matmul
    matmul_before, cudnn_before = matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    matmul.allow_tf32 = True
    try:
        monkeypatch.setattr(runner, "cuda_present", lambda: True)
        assert runner.verdict_at(probe, SUM, _case()).kind == "pass"
        monkeypatch.setattr(runner, "cuda_present", lambda: False)
        runner.verdict_at(probe, SUM, _case())
        assert seen == [(False, False), (cudnn_before, True)]
        assert torch.backends.cudnn.allow_tf32 == cudnn_before and matmul.allow_tf32
    finally:
        matmul.allow_tf32 = matmul_before
    assert matmul.allow_tf32 == matmul_before


def test_a_lost_cuda_context_is_one_crash_then_inconclusive(monkeypatch):
    """A kernel fault that loses the context is the finding; the cases after it
    in the same process only meet the lost context (1199 false failures on an
    H100 without it)."""
    from fuzzdiff.guards import cuda_context
    from fuzzdiff.search import runner
    from fuzzdiff.checks.check import Check

    def fault(target, case):
        raise torch.AcceleratorError("CUDA error: misaligned address")

    def own_bug(target, case):
        raise ValueError("the target's own error")

    monkeypatch.setattr(runner, "cuda_present", lambda: True)
    monkeypatch.setattr(cuda_context, "_lost", None)
    monkeypatch.setattr(cuda_context, "usable", lambda: True)
    assert runner.verdict_at(Check("unit_fault", fault), SUM, _case()).kind == "fail"  # context fine
    monkeypatch.setattr(cuda_context, "usable", lambda: False)
    first = runner.verdict_at(Check("unit_fault", fault), SUM, _case())
    assert first.kind == "crash" and "context is lost" in first.message, first
    later = runner.verdict_at(Check("unit_fault", fault), SUM, _case())
    assert later.kind == "inconclusive" and "misaligned address" in later.message, later
    assert runner.verdict_at(Check("unit_bug", own_bug), SUM, _case()).kind == "fail"
