"""The compile check: every backend runs and agrees with eager on correct code,
and a broken compiled path (perturbed outputs, a dropped input mutation, a
lost view, a wrong stride) is caught."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, find, given, settings
from torch.utils._pytree import tree_map

import fuzzdiff
from fuzzdiff.search.blame import PYTORCH
from fuzzdiff.case.case import Case
from fuzzdiff.checks import get_check
from fuzzdiff.checks.compile import DESCRIBED
from fuzzdiff.paths import compiled as path
from fuzzdiff.case.programs import Program
from fuzzdiff.record.format import case_from_json
from fuzzdiff.search.runner import case_strategy, run_check
from fuzzdiff.targets import get_target
from fuzzdiff.targets.discrepancies import (
    DUAL_INDUCTOR_NO_TANGENTS,
    FUNCTION_JVP_DROPPED_AT_DUALS,
    JVP_STRIDE0_AOT_FUNCTION,
    JVP_TANGENT_COPY_DYNAMIC,
    JVP_VIEW_AOT_FUNCTION,
)
from fuzzdiff.targets.target import Target
from strategies.programs import programs
from tests.selftest import zoo

CHECK = get_check("compile")
FIND = settings(max_examples=500, database=None, derandomize=True, suppress_health_check=list(HealthCheck))


def a_case(target: str, condition=lambda c: True, backend: str = "aot_eager") -> Case:
    case = find(case_strategy(CHECK, get_target(target)), condition, settings=FIND)
    return replace(case, params={**case.params, "backend": backend})


def with_program(case: Case, body) -> Case:
    return replace(case, kwargs={"program": Program(len(case.args), tuple(body)).to_json()})


WRITE_THROUGH_VIEW = [  # v0 = a[:, 1::2]; v0.mul_(2.0); v2 = torch.sin(a)
    {"op": "slice", "x": 0, "dim": 1, "start": 1, "stop": None, "step": 2},
    {"op": "mul_", "x": 1, "other": None, "scalar": 2.0},
    {"op": "call", "fn": "sin", "x": 0, "other": None},
]


def program_case(backend: str) -> Case:
    case = a_case("program_inplace", lambda c: all(n >= 2 for n in c.args[0].shape), backend)
    return with_program(case, WRITE_THROUGH_VIEW)


# -- correct backends pass ----------------------------------------------------------------


@pytest.mark.parametrize("backend", [b for b in path.BACKENDS if b != "inductor"])
@pytest.mark.parametrize("target", ["sin", "mul", "program", "program_inplace2"])
def test_backends_agree_with_eager(backend, target):
    case = a_case(target, backend=backend)
    assert run_check(CHECK, target, case).kind == "pass"


@pytest.mark.parametrize("backend", path.BACKENDS)
def test_a_write_through_a_view_passes_every_backend(backend):
    verdict = run_check(CHECK, "program_inplace", program_case(backend))
    assert verdict.kind == "pass", verdict


def test_compiled_callables_are_reused():
    case = a_case("sin", lambda c: c.args[0].shape == (3,), backend="aot_eager")
    run_check(CHECK, "sin", case)
    before = path.compiles()
    for k in range(1, 6):  # other values, one structure: no recompile
        assert run_check(CHECK, "sin", case.reseeded(k)).kind == "pass"
    assert path.compiles() == before


def test_aliasing_is_drawn_for_targets_that_write_their_inputs():
    strategy = case_strategy(CHECK, get_target("program_inplace2"))
    for kind in ("same", "view"):
        case = find(
            strategy,
            lambda c: any(a and a["alias"] and a["alias"]["kind"] == kind for a in c.params.get("aliases") or ()),
            settings=FIND,
        )
        args = path.aliased_case(case).args
        assert args[1].alias is not None and args[1].alias.kind == kind


def test_backend_is_drawn_and_replays_from_json():
    strategy = case_strategy(CHECK, get_target("sin"))
    for backend in path.BACKENDS:
        case = find(strategy, lambda c: c.params["backend"] == backend, settings=FIND)
        assert case_from_json(case.to_json()).params["backend"] == backend


# -- broken compiled paths are caught ---------------------------------------------------


def broken(monkeypatch, wrap):
    """Make the "aot_eager" backend ``wrap(call)`` (the target at its kwargs) instead."""
    monkeypatch.setattr(path, "_CACHE", {})
    real = path._build
    monkeypatch.setattr(
        path, "_build", lambda call, backend: wrap(call) if backend == "aot_eager" else real(call, backend)
    )


def test_perturbed_outputs_are_caught(monkeypatch):
    broken(monkeypatch, lambda call: lambda *a: tuple(o * (1 + 1e-6) for o in call(*a)))
    verdict = run_check(CHECK, "program", a_case("program", lambda c: c.args[0].shape[0] >= 2))
    assert verdict.kind == "fail" and "output" in verdict.message, verdict


def test_a_dropped_input_mutation_is_caught(monkeypatch):
    def drop(call):  # runs on copies: the writes into the inputs are lost
        return lambda *a: call(*(t.clone() for t in a))

    broken(monkeypatch, drop)
    verdict = run_check(CHECK, "program_inplace", program_case("aot_eager"))
    assert verdict.kind == "fail", verdict


def test_a_lost_view_is_caught(monkeypatch):
    # the values are right, but the output no longer shares its input's memory
    broken(monkeypatch, lambda call: lambda *a: tuple(o.clone() for o in call(*a)))
    verdict = run_check(CHECK, "program_inplace", program_case("aot_eager"))
    assert verdict.kind == "fail" and "views of inputs" in verdict.message, verdict


def test_a_fresh_outputs_strides_are_not_compared(monkeypatch):
    # inductor may lay out a result that is no view as it likes
    broken(
        monkeypatch,
        lambda call: lambda *a: tuple(o if o._base is not None else o.t().contiguous().t() for o in call(*a)),
    )
    case = with_program(
        a_case("program", lambda c: min(c.args[0].shape) >= 2),
        [
            {"op": "call", "fn": "add", "x": 0, "other": 1},
            {"op": "call", "fn": "sin", "x": 2, "other": None},
            {"op": "call", "fn": "mul", "x": 3, "other": 0},
        ],
    )
    assert run_check(CHECK, "program", case).kind == "pass"


def test_float32_rounding_is_not_a_failure(monkeypatch):
    # a float32 result as far from eager as float32 rounding takes it: never a failure
    broken(
        monkeypatch,
        lambda call: (
            lambda *a: tree_map(lambda o: o + o.detach().abs() * 3e-4 * torch.finfo(torch.float32).eps, call(*a))
        ),
    )
    case = a_case("sin", lambda c: c.dtype == "float32" and c.args[0].shape == (4,))
    assert run_check(CHECK, "sin", case).kind in ("pass", "inconclusive")


def test_an_eager_error_is_a_failure_unless_the_target_declares_such_inputs_invalid():
    from dataclasses import replace

    from hypothesis.errors import UnsatisfiedAssumption

    from fuzzdiff.targets import get_target

    # x.copy_(x.t()): eager refuses a partially overlapping write, by design
    case = with_program(
        a_case("program_inplace", lambda c: c.args[0].shape == (2, 2)),
        [
            {"op": "transpose", "x": 0, "dim0": 0, "dim1": 1},
            {"op": "copy_", "x": 0, "other": 1},
            {"op": "call", "fn": "sin", "x": 0, "other": None},
        ],
    )
    with pytest.raises(UnsatisfiedAssumption):  # Target.invalid: rejected, never a verdict
        run_check(CHECK, "program_inplace", case)
    strict = replace(get_target("program_inplace"), invalid=())
    verdict = run_check(CHECK, strict, case)
    assert verdict.kind == "fail" and "unsupported operation" in verdict.message


def test_dynamo_unsupported_is_unsupported(monkeypatch):
    import torch._dynamo.exc

    def refuse(call):
        def f(*a):
            raise torch._dynamo.exc.Unsupported("graph break in a test")

        return f

    broken(monkeypatch, refuse)
    assert run_check(CHECK, "sin", a_case("sin")).kind == "unsupported"


def test_program_strategy_fits_the_targets():
    # the catalog's program targets draw programs for their drawn shapes
    case = a_case("program_inplace3", lambda c: len(c.kwargs["program"]["body"]) >= 3)
    p = Program.from_json(case.kwargs["program"])
    assert p.inputs == 3
    assert find(programs([a.shape for a in case.args]), lambda p: True, settings=FIND).inputs == 3


def test_a_target_with_a_mask_argument_is_compared_under_compile():
    # inputs after the call include the bool mask: compared as numbers, never an error
    for name in ("masked_fill", "where"):
        assert run_check(CHECK, name, a_case(name)).kind == "pass", name


# -- torch.func transforms compiled whole, and compiled code at dual inputs -----------------

TRANSFORMS = [t for t in path.TRANSFORMS if t != "none"]


def transformed(case: Case, transform: str, backend: str) -> Case:
    return replace(case, params={**case.params, "transform": transform, "backend": backend})


def a_transform_case(target: str, condition=lambda c: True) -> Case:
    return a_case(target, lambda c: "transform" in c.params and condition(c))


@pytest.mark.parametrize("backend", ["aot_function", "aot_eager"])
@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("target", ["mul", "program"])
def test_every_transform_agrees_with_eager(target, transform, backend):
    case = transformed(a_transform_case(target, lambda c: c.args[0].shape != ()), transform, backend)
    verdict = run_check(CHECK, target, case)
    assert verdict.kind == "pass", verdict


def test_transforms_are_drawn_for_functional_targets_and_replay_from_json():
    strategy = case_strategy(CHECK, get_target("sin"))
    for transform in path.TRANSFORMS:
        case = find(strategy, lambda c: c.params.get("transform") == transform, settings=FIND)
        assert case_from_json(case.to_json()).params["transform"] == transform
    # a target that writes its inputs: the transforms do not apply, nothing is drawn
    case = find(case_strategy(CHECK, get_target("program_inplace")), lambda c: True, settings=FIND)
    assert "transform" not in case.params


def test_a_transform_whose_eager_check_the_target_skips_is_never_drawn():
    """torch.func documents that vmap refuses a training-mode norm's running
    statistics: a target that skips the vmap check is not drawn vmap compiled either."""
    sin = get_target("sin")
    skipping = replace(sin, name="unit_sin_skipping_vmap", skip={"vmap": "documented refusal"})

    def transforms(target):
        seen = set()

        @settings(max_examples=200, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
        @given(case_strategy(CHECK, target))
        def draw(case):
            seen.add(case.params.get("transform"))

        draw()
        return seen

    assert "vmap" in transforms(sin)
    skipped = transforms(skipping)
    assert "vmap" not in skipped and {"grad", "jvp"} <= skipped


def test_a_restricted_pair_is_never_drawn():
    from fuzzdiff.checks.compile import _conditions, restricted

    strategy = case_strategy(CHECK, get_target("sin"))
    seen = set()

    @settings(max_examples=300, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def draw(case):
        pair = (case.params.get("transform"), case.params["backend"])
        seen.add(pair)
        assert not restricted(*pair, _conditions(case)), pair

    draw()
    assert {("dual", "aot_eager"), ("vmap", "inductor")} <= seen
    for pair in (("dual", "aot_eager"), ("jvp", "aot_function")):  # the pairs a restriction leaves, still drawn
        find(strategy, lambda c, pair=pair: (c.params.get("transform"), c.params["backend"]) == pair, settings=FIND)
    # the restriction is versioned: the pair is drawn again in a torch that fixed the bug behind it
    assert restricted("dual", "inductor", {"any"}) == DUAL_INDUCTOR_NO_TANGENTS.present


def test_a_restriction_holds_while_one_of_its_discrepancies_is_present(monkeypatch):
    from fuzzdiff.checks import compile as compile_check

    layout = frozenset({"any", "layout"})
    assert compile_check.restricted("jvp", "aot_function", layout)
    assert not compile_check.restricted("jvp", "aot_function", frozenset({"any"}))
    fixed = replace(JVP_VIEW_AOT_FUNCTION, fixed_in="2.0.0")  # a release every supported torch is past
    still = replace(JVP_STRIDE0_AOT_FUNCTION, fixed_in=None)
    monkeypatch.setitem(compile_check.RESTRICTED, ("jvp", "aot_function", "layout"), (fixed, still))
    assert compile_check.restricted("jvp", "aot_function", layout)
    monkeypatch.setitem(compile_check.RESTRICTED, ("jvp", "aot_function", "layout"), (fixed,))
    assert not compile_check.restricted("jvp", "aot_function", layout)
    monkeypatch.setitem(compile_check.CONTIGUOUS_DIRECTION, ("jvp", "inductor"), (fixed,))
    assert not compile_check.contiguous_direction("jvp", "inductor")


@pytest.mark.parametrize("backend", ["aot_eager", "inductor", "aot_function"])
def test_jvp_directions_are_contiguous_where_dynamic_shapes_copy_them(backend):
    """JVP_TANGENT_COPY_DYNAMIC: under aot_eager and inductor a tangent in
    another layout than its (contiguous) primal raises, an expanded one too
    (record 2def52e7055c03dd); elsewhere, and in a torch that fixed it, every
    layout is drawn."""
    from fuzzdiff.checks.compile import contiguous_direction
    from fuzzdiff.config import FuzzConfig

    check = CHECK.configured(FuzzConfig(compile_backends=(backend,), compile_transforms=("jvp",)))
    strategy = case_strategy(check, get_target("sin"))
    layouts: set[str] = set()

    @settings(max_examples=200, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def draw(case):
        if case.params.get("transform") == "jvp":
            layouts.add(case.params["direction"]["layout"])

    draw()
    if contiguous_direction("jvp", backend):
        assert layouts == {"contiguous"}
    else:
        assert {"expanded", "transposed"} <= layouts
    assert contiguous_direction("jvp", backend) == (backend != "aot_function" and JVP_TANGENT_COPY_DYNAMIC.present)


def test_inductor_drops_the_tangents_of_dual_inputs_exactly_while_its_restriction_holds():
    """The torch behaviour behind the (dual, inductor) restriction, on the torch
    at hand: the restriction's discrepancy is present exactly where torch drops
    them (a torch that fixed it draws the pair again)."""
    import torch.autograd.forward_ad as fwAD

    x, u = torch.linspace(-1, 1, 3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    with path.dynamo_settings(), fwAD.dual_level():
        out = torch.compile(torch.sin, backend="inductor")(fwAD.make_dual(x, u))
        assert (fwAD.unpack_dual(out).tangent is None) == DUAL_INDUCTOR_NO_TANGENTS.present


def test_broken_transforms_are_caught(monkeypatch):
    # the compiled transform returns its results perturbed by one part in a million
    broken(monkeypatch, lambda call: lambda *a: tuple(o * (1 + 1e-6) for o in call(*a)))
    base = a_transform_case("mul", lambda c: math.prod(c.args[0].shape) > 1 and c.dtype == "float64")
    for transform in ("grad", "vjp", "jvp", "vmap"):
        verdict = run_check(CHECK, "mul", transformed(base, transform, "aot_eager"))
        assert verdict.kind == "fail" and f"aot_eager, {DESCRIBED[transform]} vs eager" in verdict.message, verdict


def test_lost_tangents_are_caught(monkeypatch):
    # the compiled function returns primal outputs: the dual inputs' tangents are lost
    import torch.autograd.forward_ad as fwAD

    broken(monkeypatch, lambda call: lambda *a: call(*(fwAD.unpack_dual(t).primal for t in a)))
    case = transformed(a_transform_case("mul"), "dual", "aot_eager")
    verdict = run_check(CHECK, "mul", case)
    assert verdict.kind == "fail" and "no tangent (eager: a tangent)" in verdict.message, verdict


def test_a_transform_eager_cannot_apply_is_unsupported():
    # an autograd.Function without a vmap rule: eager vmap refuses it
    sin = Target("unit_sin_function", zoo.Sin.apply, "x: n")
    case = transformed(
        find(case_strategy(CHECK, sin), lambda c: "transform" in c.params, settings=FIND), "vmap", "aot_eager"
    )
    verdict = run_check(CHECK, sin, case)
    assert verdict.kind == "unsupported" and "vmap" in verdict.message, verdict


def test_a_random_function_under_the_vmap_transform_is_unsupported():
    # vmap's default randomness="error" refuses random ops, eager and compiled alike
    # (torch.svd_lowrank draws its projection: a campaign reported it as a failure)
    noisy = Target("unit_noisy_sin", lambda x: x.sin() + 0 * torch.rand_like(x), "x: n")
    case = transformed(
        find(case_strategy(CHECK, noisy), lambda c: "transform" in c.params, settings=FIND), "vmap", "aot_eager"
    )
    verdict = run_check(CHECK, noisy, case)
    assert verdict.kind == "unsupported" and "random" in verdict.message, verdict


def test_a_dropped_custom_backward_is_found_by_the_reverse_transforms_only():
    """The zoo's Function with a no_grad fast path under compile: compile(f)
    differentiated outside and the forward-mode transforms are right, and
    compile(grad(f)) and compile(vjp(f)) drop its backward; its twin passes."""
    p = zoo.by_name("sin_no_grad_fast_path")
    base = find(
        case_strategy(CHECK, p.bug),
        lambda c: "transform" in c.params and math.prod(c.args[0].shape) > 1 and c.dtype == "float64",
        settings=FIND,
    )
    for transform in path.TRANSFORMS:
        case = transformed(base, transform, "aot_eager")
        bug, twin = run_check(CHECK, p.bug, case), run_check(CHECK, p.twin, case)
        assert twin.kind == "pass", (transform, twin)
        assert bug.kind == ("fail" if transform in ("grad", "vjp") else "pass"), (transform, bug)


# -- code a tracer cannot follow is unsupported, with what it does --------------------------


class NumpySin(torch.autograd.Function):
    """sin by a NumPy kernel (as a numba or C extension would run it), with
    correct derivatives: right wherever it runs, untraceable by AOTAutograd."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.from_numpy(np.sin(x.detach().cpu().numpy())).to(x.device)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.cos()

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * x.cos()


def sin_scaled_by_a_list(x):
    """sin, times a factor read through .tolist() (always 1)."""
    return x.sin() * float(len(x.detach().reshape(-1).tolist()) >= 0)


def _hand_case(target: Target, backend: str, transform: str) -> Case:
    from fuzzdiff.case.case import Arg
    from fuzzdiff.case.values import Values

    probe = {"seed": 1, "layout": "contiguous", "zeros": 0.0}
    params = {"backend": backend, "transform": transform, "cotangent": probe, "direction": probe, "batch": 2}
    return Case(target.ref, (Arg((3, 4), Values(seed=1)),), "float64", params=params)


NUMPY_SIN = Target("unit_numpy_sin", NumpySin.apply, "x: 3 4")


@pytest.mark.parametrize("backend", ["aot_function", "aot_function_min_cut"])
@pytest.mark.parametrize("transform", path.TRANSFORMS)
def test_a_function_that_calls_numpy_is_unsupported_under_tracing(backend, transform):
    verdict = run_check(CHECK, NUMPY_SIN, _hand_case(NUMPY_SIN, backend, transform))
    assert verdict.kind == "unsupported", verdict
    assert ".numpy()" in verdict.message and "cannot" in verdict.message and "trace" in verdict.message, verdict


@pytest.mark.parametrize("transform", ["grad", "vjp", "jvp"])
def test_a_function_that_calls_tolist_is_unsupported_under_tracing(transform):
    target = Target("unit_tolist_sin", sin_scaled_by_a_list, "x: 3 4")
    verdict = run_check(CHECK, target, _hand_case(target, "aot_function", transform))
    assert verdict.kind == "unsupported", verdict
    assert "calls .tolist(), which cannot be traced" in verdict.message, verdict


def test_a_function_that_calls_numpy_fails_no_check_but_compiled_torch_func_grad(tmp_path):
    """Untraceable code is unsupported under tracing, never a failure; but
    torch.compile (even backend="eager") of torch.func.grad or vjp through an
    autograd.Function whose forward leaves torch (NumPy) returns a zero
    gradient, silently (torch 2.13.0 CPU; eager grad, the compiled plain
    autograd.grad, and a graph break without the Function are right):
    PyTorch's bug, found here and reported as a failure of that transform."""
    report = fuzzdiff.check(NumpySin.apply, "x: n m", seed=0, max_examples=12, corpus=tmp_path)
    # torch.func.grad's zero gradient; or, at an input without elements (where the NumPy kernel
    # traces), the Function's jvp dropped at dual inputs, a PyTorch bug of its own
    assert all(
        f.check == "compile"
        and (
            f.case.params["transform"] in ("grad", "vjp")
            or (
                re.search(FUNCTION_JVP_DROPPED_AT_DUALS.message, f.message)
                and f.blame is not None
                and f.blame.whose == PYTORCH
                and not f.case.materialize().args[0].numel()
            )
        )
        for f in report.failures
    ), report.summary()
    assert report.row("compile")["unsupported"] > 0 and report.row("compile")["passed"] > 0, report.summary()
    assert report.row("grad")["passed"] > 0


def test_compiled_torch_func_grad_through_an_untraceable_function_is_zero():
    """The PyTorch bug above, plain torch: the evidence that the failure is real."""
    x = torch.tensor([[0.75]], dtype=torch.float64)
    grad = torch.func.grad(lambda t: (NumpySin.apply(t) * 1.5).sum())
    torch._dynamo.reset()
    compiled = torch.compile(grad, backend="eager")(x)
    torch.testing.assert_close(grad(x), 1.5 * x.cos())
    assert torch.equal(compiled, torch.zeros_like(x)), compiled  # fails once torch fixes it: then drop this test


@torch.library.custom_op("fuzzdiff_test::numpy_sin", mutates_args=())
def numpy_sin_op(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.sin(x.numpy()))


@numpy_sin_op.register_fake
def _(x):
    return torch.from_numpy(np.sin(x.numpy()))  # the bug: a fake kernel must not read data


numpy_sin_op.register_autograd(
    lambda ctx, g: g * ctx.saved_tensors[0].cos(),
    setup_context=lambda ctx, inputs, output: ctx.save_for_backward(inputs[0]),
)


def test_a_fake_kernel_that_calls_numpy_is_a_finding():
    """A custom op is how untraceable code is made traceable: where its
    fake kernel reads data, tracing raises the same words, and it is a bug."""
    target = Target("unit_numpy_sin_op", numpy_sin_op, "x: 3 4")
    verdict = run_check(CHECK, target, _hand_case(target, "aot_function", "none"))
    assert verdict.kind == "fail" and ".numpy() is not supported" in verdict.message, verdict
