"""The compiled_autograd check: correct backwards pass at every variant, and a
backward that differs only under compiled autograd is caught and confirmed
(fuzzdiff.confirm.against_eager's ladder)."""

from __future__ import annotations

import contextlib
from dataclasses import replace

import pytest
import torch
from hypothesis import HealthCheck, find, settings

from fuzzdiff.case.case import Case
from fuzzdiff.checks import get_check
from fuzzdiff.paths import compiled_autograd as path
from fuzzdiff.search.runner import case_strategy, run_check
from fuzzdiff.targets import get_target
from fuzzdiff.targets.target import Target

CHECK = get_check("compiled_autograd")
FIND = settings(max_examples=200, database=None, derandomize=True, suppress_health_check=list(HealthCheck))


class _Sin(torch.autograd.Function):
    """sin, saving its input: the forward of the stand-ins below."""

    @staticmethod
    def forward(x):
        return x.sin()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])


class DoubledWhenTraced(_Sin):
    """sin, whose backward doubles the gradient when dynamo traces it: what
    compiled autograd does to every custom Function's backward, and eager never."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        grad = g * x.cos()
        return 2 * grad if torch.compiler.is_compiling() else grad


PLANTED = Target("unit_doubled_when_traced", DoubledWhenTraced.apply, "x: n>=1", dtypes=(torch.float64,))


def a_case(target: Target, **params) -> Case:
    case = find(case_strategy(CHECK, target), lambda c: True, settings=FIND)
    return replace(case, params={**case.params, **params})


EAGER_VARIANTS = [
    {"backend": "eager", "forward": "eager", "order": 1},
    {"backend": "eager", "forward": "eager", "order": 2},
    {"backend": "eager", "forward": "aot_eager", "order": 1},
]


@pytest.mark.parametrize("variant", EAGER_VARIANTS)
@pytest.mark.parametrize("target", ["sin", "mul"])
def test_a_correct_backward_passes(target, variant):
    verdict = run_check(CHECK, target, a_case(get_target(target), **variant))
    assert verdict.kind == "pass", verdict


@pytest.mark.parametrize("variant", EAGER_VARIANTS[:2])
def test_a_backward_that_differs_under_compiled_autograd_fails(variant):
    verdict = run_check(CHECK, PLANTED, a_case(PLANTED, **variant))
    assert verdict.kind == "fail", verdict
    assert "compiled autograd (eager)" in verdict.message and "grad 0" in verdict.message


def test_the_planted_backward_passes_when_nothing_is_compiled(monkeypatch):
    """The failure above is the compiled side's: with compiled autograd left off, the check passes."""
    monkeypatch.setattr(path, "enabled", lambda backend, run=None: contextlib.nullcontext())
    verdict = run_check(CHECK, PLANTED, a_case(PLANTED, **EAGER_VARIANTS[0]))
    assert verdict.kind == "pass", verdict


def test_the_capture_alone_runs_the_captured_graph_without_dynamo():
    """ca_eager runs compiled autograd's captured graph as captured: a correct
    backward passes, and the planted backward, which doubles only where dynamo
    traces it, is not doubled."""
    for target in ("sin", "mul"):
        verdict = run_check(CHECK, target, a_case(get_target(target), **{**EAGER_VARIANTS[1], "backend": "ca_eager"}))
        assert verdict.kind == "pass", verdict
    verdict = run_check(CHECK, PLANTED, a_case(PLANTED, **{**EAGER_VARIANTS[0], "backend": "ca_eager"}))
    assert verdict.kind == "pass", verdict


@pytest.mark.parametrize("backend", ["ca_eager", "eager"])
def test_a_bug_of_the_capture_is_met_with_and_without_dynamo(capfd, backend):
    """Layer norm's second derivative with the bias a view of the input: the
    captured graph adds an undefined gradient (a torch bug, known as
    LAYER_NORM_COMPILED_AUTOGRAD_BIAS_ALIASED), met with the capture alone and
    with dynamo's trace of it, and without the traceback a failing FX graph
    prints to stderr beside raising."""
    target = get_target("layer_norm")
    case = find(
        case_strategy(CHECK, target),
        lambda c: c.args[2].alias is not None and c.args[2].alias.of == 0 and 0 not in c.args[0].shape,
        settings=FIND,
    )
    case = replace(case, params={**case.params, "backend": backend, "forward": "eager", "order": 2})
    capfd.readouterr()
    verdict = run_check(CHECK, target, case)
    assert verdict.kind == "fail" and "must be Tensor, not NoneType" in verdict.message, verdict
    assert "FX-traced Module" not in capfd.readouterr().err


class PlainSin(_Sin):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.cos()


def test_a_variant_at_other_values_reuses_the_graphs_and_another_target_compiles_its_own(monkeypatch):
    """A user's second call at new values runs the graphs compiled for the
    first; a graph of the same structure compiled for another target is not
    reused (that would hide the planted backward's doubling)."""
    compiles = []
    real = path.backward_compiler

    def counting(backend):
        inner = real(backend)
        return lambda gm: (compiles.append(gm), inner(gm))[1]

    monkeypatch.setattr(path, "backward_compiler", counting)
    plain = Target("unit_plain_sin_function", PlainSin.apply, "x: n>=1", dtypes=(torch.float64,))
    case = a_case(plain, **EAGER_VARIANTS[0])
    assert run_check(CHECK, plain, case).kind == "pass"
    first = len(compiles)
    assert first >= 1
    assert run_check(CHECK, plain, case.reseeded(1)).kind == "pass"
    assert len(compiles) == first  # the variant reran the cached graph
    verdict = run_check(CHECK, PLANTED, replace(case, target=PLANTED.name))
    assert verdict.kind == "fail" and len(compiles) > first, verdict


def test_compiled_autograd_is_off_after_a_run():
    """fuzzdiff is a guest: the process's autograd compiler is as it was."""
    run_check(CHECK, "sin", a_case(get_target("sin"), **EAGER_VARIANTS[0]))
    prior, _ = torch._C._dynamo.compiled_autograd.set_autograd_compiler(None, False)
    assert prior is None


class CosTimes(torch.autograd.Function):
    """g * cos(x), with no backward of its own: a first derivative with no second."""

    @staticmethod
    def forward(g, x):
        return g * x.cos()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass


class SinOnce(_Sin):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return CosTimes.apply(g, x)


def test_a_second_derivative_eager_lacks_is_unsupported():
    target = Target("unit_sin_once", SinOnce.apply, "x: n>=1", dtypes=(torch.float64,))
    verdict = run_check(CHECK, target, a_case(target, backend="eager", forward="eager", order=2))
    assert verdict.kind == "unsupported" and "no derivative formula" in verdict.message, verdict


def _broadcast_pair(a, b):
    return torch.broadcast_tensors(a, b)


def test_a_stride0_leafs_gradient_is_compared_per_memory_location():
    """A leaf laid out with stride 0 holds one value per memory location: only
    the sum of its gradient over the entries that share one is determined.
    A dynamic=True compiled forward of torch.broadcast_tensors splits it
    evenly ([35, 35, 35]) where eager gives [30, 35, 40]: no bug, and the
    campaign reported it as one."""
    from fuzzdiff.case.case import Arg
    from fuzzdiff.case.layout import Layout
    from fuzzdiff.case.values import Values

    target = Target("unit_broadcast_pair", _broadcast_pair, "a: 3, b: 5 1 1", dtypes=(torch.float64,))
    spread = Case("unit_broadcast_pair", (
        Arg((3,), Values(seed=1, constant=(0,)), Layout(3, (0,))),
        Arg((5, 1, 1), Values(seed=2, constant=(0, 1, 2)), Layout(2, (0, 0, 0))),
    ))
    case = replace(a_case(target, backend="eager", forward="aot_eager", order=1), args=spread.args)
    verdict = run_check(CHECK, target, case)
    assert verdict.kind == "pass", verdict
    # the comparison still sees a wrong split's sum: a planted backward that doubles fails at the same leaves
    doubled = Target("unit_doubled_broadcast", lambda a, b: (DoubledWhenTraced.apply(a), b), "a: 3, b: 5 1 1",
                     dtypes=(torch.float64,))
    assert run_check(CHECK, doubled, replace(case, target=doubled.name)).kind == "fail"
