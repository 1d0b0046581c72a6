"""The OpInfo adapter, the tensorly targets and the cross-backend check."""

import copy
import json
import subprocess
import sys
import unittest
from dataclasses import replace

import pytest
import torch
from hypothesis import HealthCheck, find, settings
from torch.testing._internal.common_methods_invocations import tol, toleranceOverride
from torch.testing._internal.opinfo.core import DecorateInfo

from fuzzdiff.case.case import Case
from fuzzdiff.checks import CHECKS
from fuzzdiff.record.format import case_from_json
from fuzzdiff.search.runner import case_strategy, run_check
from fuzzdiff.targets import get_target, select
from fuzzdiff.targets.opinfo import adapter as opinfo, build as opinfo_build, skips as opinfo_skips, tables as opinfo_tables
from fuzzdiff.targets.catalog.tensorly_ops import TensorlyCall
from fuzzdiff.targets.opinfo.known import KNOWN

FIND = settings(database=None, derandomize=True, max_examples=200, deadline=None,
                suppress_health_check=list(HealthCheck))


def op(key):
    return next(o for o in opinfo.op_db() if opinfo.op_key(o) == key)


def a_case(target, check="layout", where=lambda c: True) -> Case:
    return find(case_strategy(CHECKS[check], target), where, settings=FIND)


# -- how many --------------------------------------------------------------------------------

def test_at_least_500_opinfo_targets():
    targets = opinfo.opinfo_targets()
    assert len(targets) >= 500
    assert len({t.ref for t in targets}) == len(targets)
    assert all(t.ref.startswith(opinfo.PREFIX) and t.family == "opinfo" for t in targets)


def test_at_least_10_tensorly_targets():
    assert len(select(families=["tensorly"])) >= 10


# -- replay and determinism ------------------------------------------------------------------

def test_sample_inputs_are_deterministic_and_leave_the_global_generators_alone():
    before = torch.random.get_rng_state()
    first, second = opinfo.samples(op("add")), opinfo.samples(op("add"))
    assert torch.equal(torch.random.get_rng_state(), before)
    assert len(first) == len(second) > 1
    for a, b in zip(first, second):
        assert torch.equal(a.input, b.input) and a.kwargs.keys() == b.kwargs.keys()


@pytest.mark.parametrize("name", ["add", "nn.functional.dropout", "linalg.svd", "normal"])
def test_samples_are_torchs_own_sample_inputs(name):
    """Drawn without torch's tracking iterator, yet the very samples it yields
    (random ones among them: dropout's, normal's)."""
    import random

    import numpy as np

    torchs_op = op(name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(opinfo_tables.SEED)
        random.seed(opinfo_tables.SEED)
        np.random.seed(opinfo_tables.SEED)
        theirs = list(torchs_op.sample_inputs("cpu", torch.float64, requires_grad=True))
    ours = opinfo.samples(torchs_op)
    assert len(ours) == len(theirs) > 0
    for a, b in zip(ours, theirs):
        mine, _ = torch.utils._pytree.tree_flatten((a.input, a.args, a.kwargs))
        torchs, _ = torch.utils._pytree.tree_flatten((b.input, b.args, b.kwargs))
        assert len(mine) == len(torchs)
        for x, y in zip(mine, torchs):
            assert torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y


def test_target_name_names_the_op_and_the_sample():
    t = get_target("opinfo/mul@0")
    assert t.name == "mul@0" and t.ref == "opinfo/mul@0" and t.family == "opinfo"
    sample = opinfo.samples(op("mul"))[0]
    assert [tuple(map(int, str(a).split(":")[1].split())) for a in t.args] == [
        tuple(x.shape) for x in (sample.input, *sample.args) if isinstance(x, torch.Tensor)]


def test_select_builds_only_the_ops_a_pattern_names():
    assert {t.name for t in opinfo.select(["opinfo/mul@*"])} == {t.name for t in opinfo.op_targets(op("mul"))}
    assert [t.name for t in opinfo.select(["mul@0"])] == ["mul@0"]
    assert opinfo.select(["opinfo/no_such_op*"]) == []


def test_unknown_opinfo_target_is_a_clear_error():
    with pytest.raises(opinfo.OpInfoError, match="no_such_op"):
        get_target("opinfo/no_such_op@0")
    with pytest.raises(opinfo.OpInfoError, match="has no target for sample 9999"):
        get_target("opinfo/mul@9999")


REPLAY = """
import json, sys, torch
from fuzzdiff.record.format import case_from_json
from fuzzdiff.targets import get_target
case = case_from_json(json.loads(sys.stdin.read()))
out = get_target(case.target).fn(*case.materialize(requires_grad=False).args, **case.kwargs)
print(json.dumps([float(x).hex() for x in torch.as_tensor(out).reshape(-1).tolist()]))
"""


def test_a_case_replays_bit_for_bit_from_json_in_a_fresh_process():
    target = get_target("opinfo/addcmul@0")
    case = a_case(target, where=lambda c: any(not a.strided.is_contiguous(a.shape) for a in c.args))
    data = json.dumps(case.to_json())
    replayed = case_from_json(json.loads(data))
    assert replayed.to_json() == case.to_json()
    for x, y in zip(case.materialize().args, replayed.materialize().args):
        assert x.stride() == y.stride() and torch.equal(x, y)
    here = target.fn(*case.materialize(requires_grad=False).args)
    there = subprocess.run([sys.executable, "-c", REPLAY], input=data, capture_output=True,
                           text=True, check=True).stdout
    assert json.loads(there) == [float(x).hex() for x in here.reshape(-1).tolist()]


def test_catalog_does_not_import_op_db():
    code = ("import sys; from fuzzdiff.targets import all_targets; all_targets(); "
            "print('torch.testing._internal.common_methods_invocations' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- values ----------------------------------------------------------------------------------

def test_range_mode_draws_within_the_samples_own_interval():
    t = get_target("opinfo/log@0")
    sample = opinfo.samples(op("log"))[0].input
    lo, hi = t.sample["a0"]
    assert 0 < lo and sample.min().item() <= lo + 0.1 and hi <= sample.max().item()
    assert t.skip.get("alias") != opinfo_skips.skips_for(op("log"), near=True)["alias"]


def test_near_mode_for_structured_ops():
    t = opinfo.op_targets(op("linalg.cholesky"))[0]
    assert t.dtypes == (torch.float64,)
    assert all(hi <= 1e-3 * 100 for _, hi in t.sample.values())
    assert "pinned near the sample" in CHECKS["alias"].why_not(t)
    case = a_case(t, "grad")
    assert run_check("grad", t, case).kind == "pass"


@pytest.mark.parametrize("ref, dtype", [("linalg.cholesky", torch.float64), ("_softmax_backward_data", torch.float32)])
def test_the_sample_follows_the_fuzzed_tensors_to_their_device_and_dtype(ref, dtype):
    """Samples are made in float64 on the CPU; a case on another device (meta
    here, cuda on a GPU) gets the sample's tensors there, constants and pinned
    values alike, and a float32 case gets the dtype the sample names as an
    argument (CUDA refuses _softmax_backward_data's float32 grad with a float64
    input_dtype; the meta kernel returns the input_dtype)."""
    t = opinfo.op_targets(op(ref))[0]
    x = torch.zeros(a_case(t, "grad").args[0].shape, dtype=dtype, device="meta")
    outs = [o for o in torch.utils._pytree.tree_leaves(t.fn(x)) if isinstance(o, torch.Tensor)]
    assert outs and all(o.device.type == "meta" and o.dtype == dtype for o in outs)


@pytest.mark.parametrize("ref", ["opinfo/native_batch_norm@0", "opinfo/native_layer_norm@0"])
def test_outputs_autograd_declares_non_differentiable_are_left_out(ref):
    # native_batch_norm's save_mean / save_invstd and native_layer_norm's mean / rstd
    # depend on the input but are non-differentiable by torch's contract (they never
    # require grad; torch.autograd.gradcheck, which OpInfo's own tests run, skips them).
    # Finite differences over them made the grad check fail on every case.
    t = get_target(ref)
    xs = [torch.randn(tuple(d.size for d in a.dims), dtype=torch.float64, requires_grad=True)
          for a in t.args]
    outs = [o for o in torch.utils._pytree.tree_flatten(t.fn(*xs))[0]
            if isinstance(o, torch.Tensor) and o.is_floating_point()]
    assert outs and all(o.requires_grad for o in outs)
    assert run_check("grad", t, a_case(t, "grad")).kind == "pass"


def test_only_floating_outputs_without_grad_beside_one_with_grad_are_left_out():
    x = [torch.randn(3, dtype=torch.float64)]
    assert opinfo_build.differentiable_outputs(lambda x: (x * 2, x.detach() + 1), x) == (True, False)
    assert opinfo_build.differentiable_outputs(lambda x: (x * 2, x.argmax()), x) is None
    assert opinfo_build.differentiable_outputs(lambda x: torch.zeros_like(x), x) is None  # none has grad


# -- applicability follows the OpInfo's flags ---------------------------------------------------

def flags(key="mul", **changes):
    o = copy.copy(op(key))
    for k, v in changes.items():
        setattr(o, k, v)
    return o


def declined(o, check):
    """Why ``check`` does not apply to op ``o`` by the check's own OpInfo role."""
    return opinfo_skips.declined(o, CHECKS[check].opinfo)


def test_no_forward_ad_skips_forward():
    assert declined(flags(), "forward") is None
    assert "supports_forward_ad" in declined(flags(supports_forward_ad=False), "forward")


def test_unbatchable_gradients_skip_vmap():
    assert declined(flags(), "vmap") is None
    assert "check_batched_grad" in declined(flags(check_batched_grad=False), "vmap")
    assert declined(flags(check_batched_forward_grad=False), "vmap") is not None
    # check_batched_forward_grad refines supports_forward_ad: without forward AD it says nothing
    assert declined(flags(check_batched_forward_grad=False, supports_forward_ad=False), "vmap") is None


def test_no_gradgrad_skips_gradgrad():
    assert declined(flags(), "gradgrad") is None
    assert "supports_gradgrad=False" in declined(flags(supports_gradgrad=False), "gradgrad")
    t = opinfo.op_targets(op("nn.functional.hardsigmoid"))[0]  # supports_gradgrad=False in op_db
    assert "supports_gradgrad=False" in CHECKS["gradgrad"].why_not(t)
    assert CHECKS["gradgrad"].why_not(get_target("opinfo/mul@0")) is None


def test_ties_skip_gradgrad_with_grad_and_forward():
    skip = opinfo_skips.skips_for(op("maximum"), near=False)
    assert skip["gradgrad"] == skip["grad"] == opinfo_tables.TIED


def test_dtype_runs_where_float32_cases_exist_and_says_why_not_elsewhere():
    t = get_target("opinfo/mul@0")
    assert torch.float32 in t.dtypes and CHECKS["dtype"].why_not(t) is None
    assert "NEAR" in CHECKS["dtype"].why_not(opinfo.op_targets(op("linalg.cholesky"))[0])
    no32 = flags(supported_backward_dtypes=lambda device: {torch.float64})
    assert "supported_backward_dtypes" in opinfo_skips.float32_skip(no32, False, [(-1.0, 1.0)])
    assert "beyond" in opinfo_skips.float32_skip(op("mul"), False, [(-1.0, 1e6)])
    assert opinfo_skips.float32_skip(op("mul"), False, [(-1.0, 1.0)]) is None
    mha = "nn.functional.multi_head_attention_forward"
    assert opinfo_skips.skips_for(op(mha), near=False)["dtype"] == opinfo_tables.DTYPE_SKIP[mha]
    assert "dtype" not in opinfo_skips.skips_for(op("mul"), near=False)


def test_mutation_runs_on_functional_ops_but_not_near_the_sample():
    assert CHECKS["mutation"].why_not(get_target("opinfo/mul@0")) is None
    assert "never reaches x" in CHECKS["mutation"].why_not(opinfo.op_targets(op("linalg.cholesky"))[0])


@pytest.mark.parametrize("check,cls,test", [("grad", "TestBwdGradients", "test_fn_grad"),
                                            ("forward", "TestFwdGradients", "test_forward_mode_AD"),
                                            ("gradgrad", "TestBwdGradients", "test_fn_gradgrad"),
                                            ("gradgrad", "TestGradients", "test_fn_gradgrad"),
                                            ("vmap", "TestVmapOperatorsOpInfo", "test_vmap_exhaustive")])
def test_an_opinfo_skip_or_xfail_skips_the_check(check, cls, test):
    o = flags()
    assert declined(o, check) is None
    for decorator in (unittest.expectedFailure, unittest.skip("flaky")):
        o.decorators = (*op("mul").decorators, DecorateInfo(decorator, cls, test))
        assert f"{cls}.{test}" in declined(o, check)
    # another device, or a tolerance override, is not a skip
    o.decorators = (DecorateInfo(unittest.expectedFailure, cls, test, device_type="cuda"),
                    DecorateInfo(toleranceOverride({torch.float64: tol(1, 1)}), cls, test))
    assert declined(o, check) is None


def test_checks_outside_the_opinfo_set_are_skipped_and_real_flags_reach_targets():
    t = get_target("opinfo/mul@0")
    assert all(CHECKS[c].why_not(t) == opinfo_tables.OUTSIDE for c in CHECKS if CHECKS[c].opinfo is None)
    no_fwd = next(o for o in opinfo.opinfo_ops() if not o.supports_forward_ad and opinfo.op_targets(o)
                  and not opinfo_tables.listed(opinfo.op_key(o), opinfo_tables.TIES))
    assert "supports_forward_ad" in CHECKS["forward"].why_not(opinfo.op_targets(no_fwd)[0])


def test_the_reason_outside_the_opinfo_set_names_the_checks_with_a_role():
    listed = opinfo_tables.OUTSIDE.partition("(")[2].rstrip(")").split(", ")
    assert sorted(listed) == sorted(c for c in CHECKS if CHECKS[c].opinfo is not None)


def test_excluded_ops_yield_no_targets():
    keys = {opinfo.op_key(o) for o in opinfo.opinfo_ops()}
    assert "nn.functional.dropout" not in keys and "bernoulli" not in keys and "as_strided" not in keys
    assert not op("bernoulli").supports_autograd or opinfo_skips.excluded(op("bernoulli"))
    with pytest.raises(opinfo.OpInfoError, match="random"):
        get_target("opinfo/nn.functional.dropout@0")


def test_known_entries_carry_evidence_and_match_targets():
    for pattern, k in KNOWN:
        assert k.reason.strip() and len(k.evidence) > 40 and set(k.checks) <= set(CHECKS), pattern
        key = pattern.removeprefix(opinfo.PREFIX).rsplit("@", 1)[0]
        assert any(opinfo_tables.listed(opinfo.op_key(o), (key,)) for o in opinfo.op_db()), pattern


# -- tensorly and the cross-backend check --------------------------------------------------------

def test_cross_backend_check_passes_on_tensorly_and_catches_a_wrong_backend():
    target = get_target("tl_cp_to_tensor")
    case = a_case(target, "backend")
    assert run_check("backend", target, case).kind == "pass"

    class OffByOne(TensorlyCall):
        def cross_backend(self, name):
            body = self.body
            return TensorlyCall(lambda *a, **k: body(*a, **k) + 1, name)

    off = OffByOne(target.fn.body)
    wrong = replace(target, fn=off, cross_backend=off.cross_backend)
    verdict = run_check("backend", wrong, case)
    assert verdict.kind == "fail" and "numpy backend" in verdict.message


def test_backend_check_applies_only_to_targets_with_another_backend():
    assert CHECKS["backend"].why_not(get_target("tl_outer")) is None
    assert "no other backend" in CHECKS["backend"].why_not(get_target("exp"))


def test_tensorly_backend_is_set_per_thread_and_restored():
    import threading

    import tensorly as tl
    seen = []
    before = tl.get_backend()
    spy = TensorlyCall(lambda x: seen.append(tl.get_backend()) or x)
    worker = threading.Thread(target=spy, args=(torch.ones(1),))
    worker.start()
    worker.join()
    assert seen == ["pytorch"] and tl.get_backend() == before


def test_native_group_norm_is_fuzzed_within_its_contract_a_contiguous_input():
    """Its refusal of a non-contiguous input is outside its domain; its weight and
    bias layouts are fuzzed, where torch 2.13 silently read them as contiguous."""
    from fuzzdiff.targets.opinfo.adapter import select

    targets = select(["opinfo/native_group_norm@*"])
    assert targets
    for target in targets:
        assert "layout" not in target.skip, target.skip
        refused = RuntimeError("Expected X.is_contiguous(memory_format) to be true, but got false.")
        assert target.rejects(refused)
        assert not target.rejects(RuntimeError("some other error"))
