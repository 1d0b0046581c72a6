"""An OpInfo sample's numbers as 0-dim tensor arguments (``scalar_targets``)."""

import subprocess
import sys

import pytest
import torch
from hypothesis import HealthCheck, find, settings
from hypothesis.errors import NoSuchExample
from torch.testing._internal.common_dtype import floating_types
from torch.testing._internal.opinfo.core import OpInfo, SampleInput

from fuzzdiff.checks import CHECKS
from fuzzdiff.paths import vmap as vmap_path
from fuzzdiff.script import standalone_script
from fuzzdiff.search.runner import case_strategy, run_check
from fuzzdiff.targets import get_target
from fuzzdiff.targets.opinfo import adapter as opinfo
from fuzzdiff.targets.opinfo.build import sample_targets
from fuzzdiff.targets.stored_sample import SampleError
from fuzzdiff.targets.target import NoGrad

FIND = settings(database=None, derandomize=True, max_examples=200, deadline=None,
                suppress_health_check=list(HealthCheck))


def op(key):
    return next(o for o in opinfo.op_db() if opinfo.op_key(o) == key)


def a_case(target, check, where=lambda c: True):
    return find(case_strategy(CHECKS[check], target), where, settings=FIND)


def s_index(target):
    return [a.name for a in target.args].index("s")


# -- a test-only op: x * s, and an OpInfo whose sample passes s as a Python number --------------

_functorch = torch._C._functorch


def _batched(t):
    """``t`` is batched at some vmap level (under any wrappers of grad and jvp)."""
    while _functorch.is_functorch_wrapped_tensor(t):
        if _functorch.is_batchedtensor(t):
            return True
        t = _functorch.get_unwrapped(t)
    return False


def planted_scale(x, s):
    """x * s, with a wrong batching rule: where s is a batched tensor its derivative is lost."""
    return x * (s.detach() if isinstance(s, torch.Tensor) and _batched(s) else s)


class _NoDerivativeInS(torch.autograd.Function):
    @staticmethod
    def forward(x, s):
        return x * s

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, g):
        x, s = ctx.saved_tensors
        if ctx.needs_input_grad[1]:
            raise NotImplementedError("the derivative for 's' is not implemented")
        return g * s, None


def no_derivative_in_s(x, s):
    return _NoDerivativeInS.apply(x, torch.as_tensor(s, dtype=x.dtype))


def a_sample_with_a_number(op, device, dtype, requires_grad, **kwargs):
    yield SampleInput(torch.linspace(-2, 3, 5, dtype=dtype, device=device, requires_grad=requires_grad), args=(0.7,))


def an_opinfo(name, fn, **kwargs):
    return OpInfo(name, op=fn, dtypes=floating_types(), sample_inputs_func=a_sample_with_a_number,
                  supports_forward_ad=True, supports_fwgrad_bwgrad=True, **kwargs)


def scalar_target(targets):
    (target,) = [t for t in targets if t.name.endswith("_t0")]
    return target


# -- which numbers become tensors -------------------------------------------------------------

def test_a_number_the_op_takes_as_a_tensor_is_a_differentiated_0dim_argument():
    t = get_target("opinfo/lerp@0_t0")  # torch.lerp(a, b, 0.4): lerp.Tensor takes the weight as a tensor
    assert t.spec == "a0: 5 5, a1: 5 5, s:" and t.args[2].dims == ()
    assert t.differentiable("s") and t.fn.near == (None, None, None)  # s reaches the op as drawn
    lo, hi = t.sample["s"]
    assert 0 < lo < 0.4 < hi < 0.8  # near the number: its sign stays
    case = a_case(t, "grad", lambda c: c.args[2].grad != "none")
    assert case.materialize().args[2].shape == ()
    assert run_check("grad", t, case).kind == "pass"


def test_only_numbers_the_op_takes_as_tensors_give_targets():
    ops = [
        "lerp",  # torch.lerp(a, b, 0.4): lerp.Tensor
        "max.reduction_with_dim",  # max(x, 1) reduces over dim 1, max(x, tensor(1.)) is the binary max
        "_batch_norm_with_update",  # momentum and eps read as Python numbers: autograd never reaches them
        "add",  # alpha is a Scalar in every overload: the call raises
    ]
    assert [t.name for t in opinfo.opinfo_targets([op(k) for k in ops]) if "_t" in t.name] == ["lerp@0_t0"]


def test_a_number_without_a_derivative_is_a_nograd_argument():
    t = scalar_target(sample_targets(an_opinfo("no_derivative_in_s", no_derivative_in_s)))
    assert t.kinds == {"s": NoGrad()}
    case = a_case(t, "grad")
    assert case.args[s_index(t)].grad == "none"
    assert run_check("grad", t, case).kind == "pass"


def test_a_number_as_a_tensor_is_named_by_its_index_and_never_stored():
    t = get_target("opinfo/lerp@0_t0")
    assert t.ref == "opinfo/lerp@0_t0"
    with pytest.raises(SampleError, match="as a tensor"):
        opinfo.stored_sample(t)
    with pytest.raises(opinfo.OpInfoError, match="no target for sample 0_t9"):
        get_target("opinfo/lerp@0_t9")


# -- under vmap -------------------------------------------------------------------------------

def test_the_number_is_drawn_batched_under_vmap():
    t = get_target("opinfo/lerp@0_t0")
    s = s_index(t)

    def batched(case):
        batch = vmap_path.Batch(t, case)
        levels = batch.plan.levels
        examples = {batch.args(e)[s].item() for e in range(levels[0].batch)}
        return len(levels) == 1 and levels[0].in_dims[s] is not None and len(examples) == levels[0].batch > 1

    case = a_case(t, "vmap", batched)
    batch = vmap_path.Batch(t, case)
    (level,) = batch.plan.levels
    assert batch.batched_args()[s].shape == (level.batch,)  # one scalar per example, each its own
    assert run_check("vmap", t, case).kind == "pass"


def test_a_wrong_derivative_of_a_batched_number_is_found():
    number, as_tensor = sample_targets(an_opinfo("planted_scale", planted_scale))
    assert as_tensor.name == "planted_scale@0_t0"
    s = s_index(as_tensor)
    case = a_case(as_tensor, "vmap", lambda c: run_check("vmap", as_tensor, c).failed)
    assert vmap_path.Plan.from_params(case.params).batched(s)
    assert case.params["composition"] != "vmap"  # the values are right; the derivative is not
    # the sample as it is, with its number a number, never reaches the bug
    with pytest.raises(NoSuchExample):
        find(case_strategy(CHECKS["vmap"], number), lambda c: run_check("vmap", number, c).failed,
             settings=settings(FIND, max_examples=30))


def test_a_batched_number_writes_a_torch_only_script(tmp_path):
    t = get_target("opinfo/lerp@0_t0")
    s = s_index(t)
    case = a_case(t, "vmap", lambda c: vmap_path.Plan.from_params(c.params).batched(s))
    script = standalone_script("vmap", case, target=t)
    (tmp_path / "repro.py").write_text(script)
    ran = subprocess.run([sys.executable, str(tmp_path / "repro.py")], capture_output=True, text=True, cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
