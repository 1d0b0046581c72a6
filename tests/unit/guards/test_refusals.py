"""One table of refusals (fuzzdiff.guards.unsupported), and every check that meets a
refusal saying so alike: unsupported with the entry's reason, never a failure;
the same code is judged where no transform refuses it."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import DynamicOutputShapeException
from torch.autograd.function import once_differentiable

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.checks import forward2
from fuzzdiff.search.runner import run_check
from fuzzdiff.targets.target import Target
from fuzzdiff.guards.unsupported import (
    ONCE_DIFFERENTIABLE,
    VMAP_INPLACE,
    REFUSALS,
    UNSUPPORTED_PATTERNS,
    indexes_by_batched_mask,
    refusal,
    refusal_of,
    through_once_differentiable,
    unsupported_reason,
)
from fuzzdiff.case.values import Values
from fuzzdiff.verdict import Unsupported

PROBE = {"seed": 1, "layout": "contiguous", "zeros": 0.0}
PROBES = {"cotangent": PROBE, "direction": {**PROBE, "seed": 2}, "second": {**PROBE, "seed": 3}}


# -- the tiny targets, one or more per refusal ---------------------------------------------


class OnceSquare(torch.autograd.Function):
    """x * x, its backward marked once_differentiable, no jvp (the old style)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * g * x


class OnceSquareWithJvp(torch.autograd.Function):
    """x * x for torch.func: a jvp, a vmap rule, a backward marked once_differentiable."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * g * x

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return 2 * x * t


def positive_squares(x):
    """A boolean mask: an output shape that depends on the values under vmap."""
    return (x[x > 0] ** 2).sum()


def branches(x):
    if x.sum() > 0:
        return x.sin()
    return x.cos()


def checks_finite(x):
    if not torch.isfinite(x).all().item():
        raise ValueError("not finite")
    return x.sin()


@torch.jit.script
def scripted_branches(x):
    if bool(x.sum() > 0):
        return x.sin()
    return x.cos()


ONCE = Target("unit_once_square", OnceSquare.apply, "x: n m")
MASK = Target("unit_positive_squares", positive_squares, "x: n m")
BRANCH = Target("unit_branches", branches, "x: n m")
ITEM = Target("unit_checks_finite", checks_finite, "x: n m")
SCRIPTED = Target("unit_scripted_branches", scripted_branches, "x: n m")


def eager_case(target: Target, shape=(3, 4)) -> Case:
    return Case(target.ref, (Arg(shape, Values(seed=1)),), "float64", params=PROBES)


def vmap_case(target: Target, composition: str, shape=(3, 4), batch=2) -> Case:
    level = {"batch": batch, "in_dims": [0], "out_dims": [0]}
    plan = {
        "composition": composition,
        "levels": [level, level] if composition == "vmap_vmap" else [level],
        "batched_layouts": [None],
    }
    return Case(target.ref, (Arg(shape, Values(seed=1)),), "float64", params={**PROBES, **plan})


def compile_case(target: Target, transform: str, shape=(3, 4)) -> Case:
    """aot_function: it traces the whole function, so it meets what cannot be traced (no graph break)."""
    params = {"backend": "aot_function", "transform": transform, "cotangent": PROBE, "direction": PROBE, "batch": 2}
    return Case(target.ref, (Arg(shape, Values(seed=1)),), "float64", params=params)


def assert_refused(verdict, name: str) -> None:
    assert verdict.kind == "unsupported", verdict
    assert refusal(name).reason in verdict.message, verdict.message


# -- the table ---------------------------------------------------------------------------------

# torch 2.13's words for each entry (one example each), as raised
SAID = {
    "torch.func memory read": RuntimeError("Cannot access data pointer of Tensor that doesn't have storage"),
    "torch.func .data": RuntimeError("accessing `data` under vmap transform is not allowed"),
    "reentrant checkpoint": RuntimeError(
        "When use_reentrant=True, torch.utils.checkpoint is incompatible with .grad() or passing an `inputs` "
        "parameter to .backward(). To resolve this error, you can either set use_reentrant=False, or call "
        ".backward() without passing the `inputs` argument."
    ),
    "traced memory read": RuntimeError("Cannot access data pointer of Tensor (e.g. FakeTensor, FunctionalTensor)."),
    "traced data-dependent value": RuntimeError("Could not guard on data-dependent expression Eq(u0, 1)"),
    "traced TorchScript branch": RuntimeError(
        "The following operation failed in the TorchScript interpreter.\nTraceback of TorchScript (most recent "
        'call last):\n  File "math.py", line 214, in artan_k\n    if torch.all(k_zero):\n       ~~~~~~~~~~~~~~~~ '
        "<--- HERE\n        return artan_k_zero_taylor(x, k, order=1)\nRuntimeError: \n"
    ),
    "traced data-dependent shape": DynamicOutputShapeException(torch.ops.aten.nonzero.default),
    "traced .numpy()": RuntimeError(".numpy() is not supported for tensor subclasses."),
    "traced .tolist()": RuntimeError(".tolist() is not supported for tensor subclasses."),
    "vmap data-dependent value": RuntimeError(
        "vmap: It looks like you're either (1) calling .item() on a Tensor or (2) attempting to use a Tensor in "
        "some data-dependent control flow or (3) encountering this error in PyTorch internals."
    ),
    "vmap data-dependent shape": RuntimeError(
        "vmap: We do not support batching operators that can support dynamic shape. Attempting to batch over "
        "indexing with a boolean mask."
    ),
    "vmap random": RuntimeError("vmap: called random operation while in randomness error mode."),
    "no batching rule": RuntimeError("Batching rule not implemented for aten::foo"),
    "custom Function under torch.func": RuntimeError(
        "In order to use an autograd.Function with functorch transforms (vmap, grad, jvp, jacrev, ...), "
        "it must override the setup_context staticmethod."
    ),
    "saved tensor hooks under torch.func": RuntimeError("torch.func transforms don't yet support saved tensor hooks."),
    "once_differentiable": RuntimeError(
        "trying to differentiate twice a function that was marked with @once_differentiable"
    ),
    "no double backward": RuntimeError("the derivative of foo: double backward not supported"),
    "no forward-mode formula": NotImplementedError(
        "Trying to use forward AD with foo that does not support it because it has not been implemented yet."
    ),
    "no derivative formula": RuntimeError("the derivative for 'foo' is not implemented."),
    "no kernel": RuntimeError("\"foo\" not implemented for 'ComplexDouble'"),
    "nothing to differentiate": RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn"),
    "dynamo": RuntimeError("torch._dynamo.exc.Unsupported: call_function foo"),
    "compiled autograd": NotImplementedError("compiled_args nyi, see [Note: Compiled Autograd] FooBackward0"),
    "export": type("UserError", (RuntimeError,), {})("Dynamic control flow is not supported at the moment."),
    "traced closure": RuntimeError("Please convert all Tensors to FakeTensors first or instantiate FakeTensorMode"),
    "ExpandedWeights": RuntimeError("Expanded Weights encountered but cannot handle function foo"),
}


def test_every_entry_has_its_words_and_no_entry_before_it_takes_them():
    assert set(SAID) == {r.name for r in REFUSALS}
    for name, e in SAID.items():
        assert refusal_of(e, traced=True) is refusal(name), name
        first = f"{type(e).__name__}: {e}".splitlines()[0]
        assert unsupported_reason(e, traced=True) == f"{refusal(name).reason}: {first}"


# more of torch 2.13's words, each for the entry that must take it
ALSO_SAID = [
    # xitorch's eigendecomposition compares with allclose: a Python bool of a batch
    (
        "no batching rule",
        RuntimeError(
            "vmap over torch.allclose isn't supported yet. Please file an issue at "
            "https://github.com/pytorch/pytorch/issues if you need this feature."
        ),
    ),
    # reentrant checkpoint at an input where the function returns a constant
    ("nothing to differentiate", RuntimeError("none of output has requires_grad=True, this checkpoint() is not necessary")),
    ("torch.func .data", RuntimeError("mutating directly with `.data` inside functorch transform is not allowed.")),
    # normflows' ActNorm assigns its parameters' .data on its first call, under vmap too
    ("torch.func .data", RuntimeError("mutating directly with `.data` under vmap transform is not allowed.")),
]


@pytest.mark.parametrize(("name", "said"), ALSO_SAID, ids=[f"{n}: {str(e)[:40]}" for n, e in ALSO_SAID])
def test_more_of_torchs_words_for_an_entry_are_that_entrys(name, said):
    assert refusal_of(said) is refusal(name)


def test_the_refusals_torch_does_not_say_name_their_detectors():
    detected = {r.name: r.detector for r in REFUSALS if r.detector is not None}
    assert detected == {
        "once_differentiable": through_once_differentiable,
        "vmap data-dependent shape": indexes_by_batched_mask,
    }


def test_the_words_of_a_tracer_refuse_only_under_tracing():
    """Said outside tracing, they come from the user's own subclass or a custom
    op's fake kernel reading data: a finding."""
    numpy = SAID["traced .numpy()"]
    assert unsupported_reason(numpy) is None
    assert not any(p.search(f"RuntimeError: {numpy}") for p in UNSUPPORTED_PATTERNS)
    assert unsupported_reason(RuntimeError("numpy() failed"), traced=True) is None


def test_an_error_no_entry_has_is_a_finding():
    assert unsupported_reason(NotImplementedError("my own op is not done")) is None
    # TorchScript's interpreter failing at a line that is no branch, or with words of its own
    for where, said in [("x = torch.mm(a, b)", ""), ("if torch.all(k):", "shape mismatch")]:
        text = f"The following operation failed in the TorchScript interpreter.\n    {where}\n    ~~~ <--- HERE\n"
        assert unsupported_reason(RuntimeError(f"{text}RuntimeError: {said}\n"), traced=True) is None
    assert unsupported_reason(IndexError("The shape of the mask [2] at index 0 does not match")) is None


# -- once_differentiable: every identity that differentiates a backward ---------------------------


def test_once_differentiable_is_refused_alike_by_gradgrad_and_forward2():
    """torch reads the dropped second derivative as zero (gradgradcheck too):
    both checks refuse, with one reason; the first derivative is judged."""
    case = eager_case(ONCE)
    for check in ("gradgrad", "forward2"):
        assert_refused(run_check(check, ONCE, case), "once_differentiable")
    assert run_check("grad", ONCE, case).kind == "pass"


def test_forward2_refuses_every_identity_through_the_backward_and_judges_the_forward_ones():
    """hessian (jacfwd(jacrev)) and jacrev(jacrev) run inside torch.func, where
    no graph can be walked: the eager graph decides for them."""
    target = Target("unit_once_square_sum", lambda x: OnceSquareWithJvp.apply(x).sum(), "x: n m")
    refusals = forward2._Refusals.at(target, eager_case(target))
    assert {name: refusals.why[name] for name in forward2.THROUGH_BACKWARD} == dict.fromkeys(
        forward2.THROUGH_BACKWARD, ONCE_DIFFERENTIABLE
    )
    assert set(refusals.paths()) == {"forward-over-forward", "reverse-over-forward", "jacfwd(jacfwd)"}


@pytest.mark.parametrize("path", [forward2.reverse_over_reverse, forward2.forward_over_reverse])
def test_forward2s_reverse_paths_refuse_by_themselves(path):
    """What a standalone script copies never reads the dropped term as zero."""
    x = torch.rand(3, dtype=torch.float64, requires_grad=True)
    u, u2, w = torch.rand(3, dtype=torch.float64), torch.rand(3, dtype=torch.float64), torch.rand(3)
    with pytest.raises(Unsupported, match="once_differentiable"):
        path(lambda x: [OnceSquareWithJvp.apply(x)], [x], [u], [u2], [w.double()])


# -- vmap: data-dependent shape, value ----------------------------------------------------------

COMPOSITIONS = ("vmap", "vmap_vjp", "vjp_vmap", "vmap_jvp", "jvp_vmap", "vmap_vmap", "vmap_grad")


@pytest.mark.parametrize("composition", COMPOSITIONS)
@pytest.mark.parametrize("shape", [(3, 4), (0, 4)], ids=["values", "empty"])
def test_boolean_mask_indexing_is_refused_by_vmap_in_every_composition(composition, shape):
    """At an empty example vmap raises an IndexError of its own instead of its refusal."""
    assert_refused(run_check("vmap", MASK, vmap_case(MASK, composition, shape)), "vmap data-dependent shape")


def test_outputs_of_other_shapes_per_example_are_the_same_refusal():
    target = Target("unit_positive", lambda x: x[x > 0], "x: n")
    assert_refused(run_check("vmap", target, vmap_case(target, "vmap", (6,), 4)), "vmap data-dependent shape")


def test_only_a_mask_that_varies_over_the_batch_is_refused():
    mask = torch.tensor([True, False, True, True])
    target = Target("unit_constant_mask", lambda x: x[:, mask].sin(), "x: n 4")
    assert run_check("vmap", target, vmap_case(target, "vmap")).kind == "pass"


def test_an_error_raised_before_the_mask_is_still_a_finding():
    def wrong_then_masked(x):
        y = x @ torch.ones(2, 2, dtype=x.dtype)  # x has 4 columns
        return y[y > 0]

    target = Target("unit_wrong_then_masked", wrong_then_masked, "x: n 4")
    verdict = run_check("vmap", target, vmap_case(target, "vmap", (0, 4)))
    assert verdict.kind == "fail" and "cannot be multiplied" in verdict.message, verdict


@pytest.mark.parametrize("target", [BRANCH, ITEM], ids=["control flow", ".item()"])
@pytest.mark.parametrize("composition", ["vmap", "vmap_grad", "jvp_vmap"])
def test_a_value_read_into_python_is_refused_by_vmap_alike(target, composition):
    """Under grad inside vmap torch cannot tell .item() from control flow: one entry, one reason."""
    assert_refused(run_check("vmap", target, vmap_case(target, composition)), "vmap data-dependent value")


@pytest.mark.parametrize("shape", [(3, 4), (0, 4)], ids=["values", "empty"])
def test_compiles_eager_vmap_refuses_boolean_mask_indexing_alike(shape):
    assert_refused(run_check("compile", MASK, compile_case(MASK, "vmap", shape)), "vmap data-dependent shape")


@pytest.mark.parametrize(
    ("target", "name"),
    [
        (MASK, "traced data-dependent shape"),
        (BRANCH, "traced data-dependent value"),
        (ITEM, "traced data-dependent value"),
        (SCRIPTED, "traced TorchScript branch"),
    ],
    ids=["boolean mask", "control flow", ".item()", "TorchScript control flow"],
)
def test_compile_refuses_what_aot_function_cannot_trace(target, name):
    assert_refused(run_check("compile", target, compile_case(target, "none")), name)


@pytest.mark.parametrize(
    "target", [MASK, BRANCH, ITEM, SCRIPTED], ids=["boolean mask", "control flow", ".item()", "TorchScript"]
)
@pytest.mark.parametrize("check", ["grad", "forward", "gradgrad", "forward2"])
def test_the_same_code_is_judged_in_eager(target, check):
    verdict = run_check(check, target, eager_case(target))
    assert verdict.kind == "pass", verdict


def add_batched_into_unbatched(x, b):
    out = x * 2  # not batched where only b is
    out += b.unsqueeze(-1)  # julius's fft_conv1d: a batched bias added in place
    return out


@pytest.mark.parametrize("composition", ["vmap", "vmap_vjp", "vmap_vmap"])
def test_an_in_place_write_of_a_batched_value_into_an_unbatched_tensor_is_refused(composition):
    """torch.func documents it as unsupported; torch 2.13 says so only by shapes."""
    target = Target("unit_add_batched", add_batched_into_unbatched, "x: n m, b: n")
    level = {"batch": 2, "in_dims": [None, 0], "out_dims": [0]}
    plan = {"composition": composition, "levels": [level, level] if composition == "vmap_vmap" else [level],
            "batched_layouts": [None, None]}
    case = Case(target.ref, (Arg((3, 4), Values(seed=1)), Arg((3,), Values(seed=2))), "float64",
                params={**PROBES, **plan})
    verdict = run_check("vmap", target, case)
    assert verdict.kind == "unsupported" and VMAP_INPLACE in verdict.message, verdict


def _scaled_by_its_data(x):
    return x * x.data.abs().sum()


def test_data_under_a_torch_func_transform_is_unsupported_not_torchs_bug():
    """torch.func refuses .data on purpose (pytorch_metric_learning's ArcFace
    assigns W.data on every call): a vmap run says so, and is no failure."""
    import fuzzdiff

    report = fuzzdiff.check(_scaled_by_its_data, "x: n", checks=["vmap"], seed=0, max_examples=10,
                            progress=False, isolate=False)
    assert report.ok, report.failures
    assert ".data" in report.tallies["vmap"].reasons.get("unsupported", ""), report.tallies["vmap"].reasons


def _checkpointed_reentrant(x):
    import torch.utils.checkpoint

    return torch.utils.checkpoint.checkpoint(torch.sin, x, use_reentrant=True) * 2


def test_a_reentrant_checkpoint_is_unsupported_at_every_input_not_an_input_domain():
    """memory-efficient-attention-pytorch checkpoints with use_reentrant=True: its
    plain call's backward raises under autograd.grad at every input, which is
    torch's documented limit, not a domain of the function's inputs."""
    import fuzzdiff

    report = fuzzdiff.check(_checkpointed_reentrant, "x: n", checks=["grad"], seed=0, max_examples=10,
                            progress=False, isolate=False)
    assert report.ok, [f.message for f in report.failures]
    assert "use_reentrant=True" in report.tallies["grad"].reasons.get("unsupported", ""), report.tallies["grad"].reasons
