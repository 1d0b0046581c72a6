"""The per_sample check: its strategies reach every module kind and variant the
issue names, it tells a wrong per-sample path from a right one, and
ExpandedWeights' own "unsupported" errors are never failures.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from tests.unit.fdhelpers import reach
from torch import nn

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.checks import CHECKS
from fuzzdiff.checks.per_sample import CHECK
from fuzzdiff.search.fuzzing import FuzzFailure, fuzz
from fuzzdiff.targets.known import matching
from fuzzdiff.paths import expanded as path
from fuzzdiff.record.format import case_from_json
from fuzzdiff.search.runner import case_strategy, run_check
from fuzzdiff.targets import all_targets, get_target
from fuzzdiff.targets.module import one_sample
from fuzzdiff.targets.target import Target
from fuzzdiff.case.values import Values
from fuzzdiff.config import FuzzConfig

MODULES = [t for t in all_targets() if t.family == "modules"]


def cases_of(name: str):
    return case_strategy(CHECK, get_target(name))


def batched_input(case: Case) -> torch.Tensor:
    """The batch the module gets, as the check builds it."""
    batch = path.Batch(get_target(case.target), case)
    d, _ = path.batch_dims(batch.module())
    return batch.inputs(False, d)[1][-1]


def plain_case(name: str, kwargs: dict, shape, batch=3, reduction="mean", input_grad=True,
               dtype="float64", layouts=None) -> Case:
    target = get_target(name)
    args = tuple(Arg(tuple(shape), Values(seed=i + 1)) for i, _ in enumerate(target.args))
    return Case(name, args, dtype, kwargs=kwargs,
                params={"batch": batch, "loss_reduction": reduction, "input_grad": input_grad,
                        "infer_batch": False, "layouts": layouts or [None] * len(args),
                        "cotangent": {"seed": 5, "layout": "contiguous", "zeros": 0.0}})


LINEAR = {"out_features": 2, "bias": True, "seed": 3}


# -- the check applies to module targets only -----------------------------------------

def test_applies_to_module_targets_only():
    assert len(MODULES) >= 16
    assert all(CHECK.why_not(t) is None for t in MODULES)
    assert all(CHECK.why_not(t) is not None for t in all_targets() if t.family != "modules")
    assert CHECKS["per_sample"] is CHECK


# -- the strategies reach every module kind and variant the issue names ---------------

@pytest.mark.parametrize("target", MODULES, ids=[t.name for t in MODULES])
def test_every_module_kind_builds_and_runs(target):
    """A drawn case of every kind builds its module and runs all three paths."""
    case = reach(case_strategy(CHECK, target), lambda c: True, max_examples=5)
    result = path.run(target, case)
    assert result.looped.names and len(result.expanded.tensors) == len(result.looped.tensors) == len(result.looped.names)


@pytest.mark.parametrize("name,kind", [("nn_conv1d", nn.Conv1d), ("nn_conv2d", nn.Conv2d),
                                       ("nn_conv3d", nn.Conv3d), ("nn_rnn", nn.RNN),
                                       ("nn_lstm", nn.LSTM), ("nn_gru", nn.GRU),
                                       ("nn_instance_norm1d", nn.InstanceNorm1d),
                                       ("nn_instance_norm2d", nn.InstanceNorm2d),
                                       ("nn_instance_norm3d", nn.InstanceNorm3d)])
def test_targets_build_the_module_they_name(name, kind):
    case = reach(cases_of(name), lambda c: True, max_examples=5)
    assert isinstance(path.Batch(get_target(name), case).module(), kind)


@pytest.mark.parametrize("padding", ["same", "valid", 1])
def test_reaches_conv_padding(padding):
    case = reach(cases_of("nn_conv2d"), lambda c: c.kwargs["geometry"]["padding"] == padding)
    assert path.Batch(get_target("nn_conv2d"), case).module().padding in (padding, (1, 1))


def test_reaches_grouped_dilated_strided_biasless_convs():
    case = reach(cases_of("nn_conv1d"), lambda c: c.kwargs["groups"] > 1
                 and c.kwargs["geometry"]["dilation"] == 2 and not c.kwargs["bias"])
    module = path.Batch(get_target("nn_conv1d"), case).module()
    assert module.groups > 1 and module.dilation == (2,) and module.bias is None
    reach(cases_of("nn_conv3d"), lambda c: c.kwargs["geometry"]["stride"] == 2)


def test_reaches_padding_idx_and_linear_extra_dims():
    case = reach(cases_of("nn_embedding_padding_idx"), lambda c: c.kwargs["padding_idx"] > 0)
    module = path.Batch(get_target("nn_embedding_padding_idx"), case).module()
    assert module.embedding.padding_idx == case.kwargs["padding_idx"]
    case = reach(cases_of("nn_linear"), lambda c: len(c.args[0].shape) >= 2 and not c.kwargs["bias"])
    assert batched_input(case).dim() >= 3


@pytest.mark.parametrize("flag", [True, False])
def test_reaches_batch_first_and_affine_switches(flag):
    case = reach(cases_of("nn_gru"), lambda c: c.kwargs["batch_first"] is flag)
    assert path.batch_dims(path.Batch(get_target("nn_gru"), case).module())[0] == (0 if flag else 1)
    reach(cases_of("nn_layer_norm"), lambda c: c.kwargs["elementwise_affine"] is flag)
    reach(cases_of("nn_instance_norm2d"), lambda c: c.kwargs["affine"] is flag)
    reach(cases_of("nn_group_norm"), lambda c: c.kwargs["affine"] is flag and c.kwargs["num_groups"] > 1)


def test_shared_linear_uses_one_module_twice():
    case = reach(cases_of("nn_shared_linear"), lambda c: True)
    module = path.Batch(get_target("nn_shared_linear"), case).module()
    calls = []
    module.linear.register_forward_hook(lambda *_: calls.append(1))
    module(torch.zeros(1, case.args[0].shape[-1], dtype=torch.float64))
    assert len(calls) == 2 and len(list(module.modules())) == 2


@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("batch", [1, 8])
def test_reaches_loss_reductions_and_batch_sizes(reduction, batch):
    reach(cases_of("nn_linear"), lambda c: c.params["loss_reduction"] == reduction
          and c.params["batch"] == batch)


def test_reaches_noncontiguous_batches_and_inputs_without_grad():
    case = reach(cases_of("nn_conv2d"), lambda c: not batched_input(c).is_contiguous())
    assert not batched_input(case).is_contiguous()
    reach(cases_of("nn_lstm"), lambda c: c.params["input_grad"] is False)
    reach(cases_of("nn_linear"), lambda c: c.params["infer_batch"] is True)


def test_samples_of_a_batch_differ_and_replay_from_json():
    case = plain_case("nn_linear", LINEAR, (3,), batch=4)
    x = batched_input(case)
    assert len({tuple(row.tolist()) for row in x}) == 4
    again = case_from_json(json.loads(json.dumps(case.to_json())))
    a, b = path.run(get_target("nn_linear"), case), path.run(get_target("nn_linear"), again)
    assert all(torch.equal(u, v) for u, v in zip(a.expanded.tensors + a.looped.tensors, b.expanded.tensors + b.looped.tensors))


# -- right and wrong per-sample paths ---------------------------------------------------

@pytest.mark.parametrize("name,kwargs,shape", [
    ("nn_linear", LINEAR, (2, 3)),
    ("nn_conv1d", {"out_per_group": 2, "groups": 2, "bias": True, "seed": 1,
                   "geometry": {"kernel_size": [2], "stride": 1, "padding": "same", "dilation": 2}},
     (2, 3)),
    ("nn_shared_linear", {"bias": True, "seed": 2}, (3,)),
    ("nn_gru", {"cell": "GRU", "hidden_size": 2, "num_layers": 2, "bias": True,
                "batch_first": False, "bidirectional": True, "seed": 4}, (3, 2)),
])
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_correct_paths_pass(name, kwargs, shape, reduction):
    verdict = run_check(CHECK, get_target(name), plain_case(name, kwargs, shape, reduction=reduction))
    assert verdict.kind == "pass", verdict


def test_vmap_reference_is_compared_where_it_runs_and_skipped_for_rnns():
    linear = path.run(get_target("nn_linear"), plain_case("nn_linear", LINEAR, (3,)))
    assert linear.vmapped.tensors and not linear.vmapped.skipped
    rnn = {"cell": "RNN", "nonlinearity": "tanh", "hidden_size": 2, "num_layers": 1, "bias": True,
           "batch_first": True, "bidirectional": False, "seed": 1}
    result = path.run(get_target("nn_rnn"), plain_case("nn_rnn", rnn, (3, 2)))
    assert not result.vmapped.tensors and "Batching rule not implemented" in result.vmapped.skipped


def _unscaled(real):
    """call_for_per_sample_grads that forgets to scale 'mean' by the batch size."""
    def call(module, *, batch_size=None, loss_reduction="sum", batch_first=True):
        return real(module, batch_size=batch_size, loss_reduction="sum", batch_first=batch_first)
    return call


def _batch_summed(real):
    """A per-sample "gradient" that is the gradient summed over the batch, for every sample."""
    def call(module, *, batch_size=None, loss_reduction="sum", batch_first=True):
        def forward(*args):
            n = args[0].shape[0 if batch_first else 1]
            for p in module.parameters():
                p.grad = None
                p.register_post_accumulate_grad_hook(
                    lambda p: setattr(p, "grad_sample", p.grad.expand(n, *p.shape).clone()))
            return module(*args)
        return forward
    return call


@pytest.mark.parametrize("wrong", [_unscaled, _batch_summed])
def test_a_wrong_per_sample_path_is_caught(monkeypatch, wrong):
    import torch.nn.utils._per_sample_grad as psg
    case = plain_case("nn_linear", LINEAR, (3,), batch=3, reduction="mean")
    assert run_check(CHECK, get_target("nn_linear"), case).kind == "pass"
    monkeypatch.setattr(psg, "call_for_per_sample_grads", wrong(psg.call_for_per_sample_grads))
    verdict = run_check(CHECK, get_target("nn_linear"), case)
    assert verdict.kind == "fail", verdict
    assert "ExpandedWeights vs a loop" in verdict.message and "per-sample grad" in verdict.message


def test_fuzzing_finds_a_wrong_path_and_shrinks_it(monkeypatch):
    import torch.nn.utils._per_sample_grad as psg
    from hypothesis import HealthCheck, settings
    monkeypatch.setattr(psg, "call_for_per_sample_grads", _unscaled(psg.call_for_per_sample_grads))
    with pytest.raises(FuzzFailure) as caught:
        fuzz(CHECK, get_target("nn_linear"), FuzzConfig(variants=1, structures=1),
             settings=settings(max_examples=60, derandomize=True, database=None, deadline=None,
                               suppress_health_check=list(HealthCheck)))
    shrunk = caught.value.case.params
    assert shrunk["loss_reduction"] == "mean" and shrunk["batch"] == 2


def _float32_off(monkeypatch, by: float):
    """ExpandedWeights' gradients off by ``by`` (relative) in float32 only."""
    import torch.nn.utils._per_sample_grad as psg
    real = psg.call_for_per_sample_grads

    def jittered(module, **options):
        forward = real(module, **options)

        def call(*args):
            out = forward(*args)
            if out.dtype == torch.float32:
                out.register_hook(lambda g: g * (1 + by))
            return out
        return call
    monkeypatch.setattr(psg, "call_for_per_sample_grads", jittered)


def test_a_float32_rounding_difference_of_the_reference_is_not_a_failure(monkeypatch):
    """The loop off in float32 only, ExpandedWeights right: float64 agrees and
    ExpandedWeights matches it, so what is left is the reference's precision
    (the dtype check's question)."""
    real = path.by_loop
    monkeypatch.setattr(path, "by_loop", lambda *args: [
        t * (1 + 1e-3) if t.dtype == torch.float32 else t for t in real(*args)])
    case = plain_case("nn_linear", LINEAR, (3,), dtype="float32")
    verdict = run_check(CHECK, get_target("nn_linear"), case)
    assert verdict.kind == "inconclusive" and "float64 agrees" in verdict.message, verdict


def test_a_float32_only_error_is_a_failure(monkeypatch):
    """Far beyond float32's tolerance and the linear layer's conditioning."""
    _float32_off(monkeypatch, 1e-3)
    case = plain_case("nn_linear", LINEAR, (3,), dtype="float32")
    verdict = run_check(CHECK, get_target("nn_linear"), case)
    assert verdict.kind == "fail" and "float32 vs float64 on the same values" in verdict.message, verdict


# -- unsupported configurations and real discrepancies --------------------------------

def test_an_unsupported_configuration_is_unsupported_not_a_failure():
    # grouped: ExpandedWeights unfolds the input, and its unfold3d has no dilation
    dilated = {"out_per_group": 1, "groups": 2, "bias": True, "seed": 1,
               "geometry": {"kernel_size": [2, 2, 2], "stride": 1, "padding": 0, "dilation": 2}}
    verdict = run_check(CHECK, get_target("nn_conv3d"), plain_case("nn_conv3d", dilated, (2, 3, 3, 3)))
    assert verdict.kind == "unsupported" and "dilation" in verdict.message


class _MatmulModule(nn.Module):
    """``x @ w``: ExpandedWeights has no per-sample rule for matmul."""

    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.linspace(-1, 1, n * 2, dtype=torch.float64).reshape(n, 2))

    def forward(self, x):
        return x @ self.w


def _matmul_module(x, seed):
    return _MatmulModule(x.shape[-1]).to(x.dtype)


def _matmul(x, seed):
    return one_sample(_matmul_module(x, seed), x)


def test_an_op_without_a_per_sample_rule_is_unsupported():
    target = Target("unit_matmul_module", _matmul, "x: i", kwargs={"seed": 0}, module=_matmul_module)
    case = replace(plain_case("nn_linear", LINEAR, (3,)), target=target.name, kwargs={"seed": 0})
    verdict = run_check(CHECK, target, case)
    assert verdict.kind == "unsupported"
    assert "Expanded Weights encountered but cannot handle function" in verdict.message


def test_embedding_padding_idx_discrepancy_is_real():
    kwargs = {"extra_rows": 1, "embedding_dim": 2, "seed": 0, "padding_idx": 0}
    case = plain_case("nn_embedding_padding_idx", kwargs, (2,), batch=2)
    case = replace(case, args=(replace(case.args[0], values=Values(seed=1, low=0, high=1, kind="int"),
                                       grad="none", dtype="int64"), case.args[1]))
    verdict = run_check(CHECK, get_target("nn_embedding_padding_idx"), case)
    assert verdict.kind == "fail" and "embedding.weight" in verdict.message
    target = get_target("nn_embedding_padding_idx")
    assert matching(target.known, "per_sample", case, verdict) is not None
    without = replace(case, kwargs={**kwargs, "padding_idx": None})
    assert run_check(CHECK, get_target("nn_embedding"), replace(without, target="nn_embedding")).kind == "pass"


def test_group_norm_noncontiguous_input_discrepancy_is_real():
    kwargs = {"num_groups": 1, "affine": True, "eps": 1e-5, "seed": 0}
    # (B, c, l) = (2, 3, 2) stored with the length dim outermost: transposed
    lay = {"storage_size": 12, "strides": [1, 2, 6], "offset": 0}
    case = plain_case("nn_group_norm", kwargs, (3, 2), batch=2, layouts=[lay])
    verdict = run_check(CHECK, get_target("nn_group_norm"), case)
    assert verdict.kind == "fail" and "is_contiguous" in verdict.message
    assert run_check(CHECK, get_target("nn_group_norm"), replace(case, params={
        **case.params, "layouts": [None]})).kind == "pass"


# -- standalone scripts -----------------------------------------------------------------

def _script_verdict(case: Case):
    """(exit status, last line) of the per_sample script for ``case``, run in-process."""
    import contextlib
    import io

    from fuzzdiff.script import standalone_script
    source = standalone_script("per_sample", case)
    assert "fuzzdiff" not in source.split("Found by fuzzdiff", 1)[1]
    ns = {"__name__": "script_under_test"}
    exec(compile(source, "<script>", "exec"), ns)  # noqa: S102 - the code under test
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = ns["main"]()
    return code, out.getvalue().strip().splitlines()[-1]


def test_script_prints_ok_for_a_passing_case():
    code, last = _script_verdict(plain_case("nn_conv1d", {
        "out_per_group": 1, "groups": 1, "bias": True, "seed": 1,
        "geometry": {"kernel_size": [2], "stride": 2, "padding": 1, "dilation": 1}}, (2, 3)))
    assert code == 0 and last.startswith("OK")


def test_script_reproduces_the_padding_idx_mismatch():
    kwargs = {"extra_rows": 1, "embedding_dim": 2, "seed": 0, "padding_idx": 0}
    case = plain_case("nn_embedding_padding_idx", kwargs, (2,), batch=2)
    case = replace(case, args=(replace(case.args[0], values=Values(seed=1, low=0, high=1, kind="int"),
                                       grad="none", dtype="int64"), case.args[1]))
    code, last = _script_verdict(case)
    assert code == 1 and last.startswith("MISMATCH") and "embedding.weight" in last


def test_conv_noncontiguous_grad_output_discrepancy_is_real():
    kwargs = {"out_per_group": 2, "groups": 1, "bias": False, "seed": 0,
              "geometry": {"kernel_size": [1], "stride": 1, "padding": "same", "dilation": 1}}
    case = plain_case("nn_conv1d", kwargs, (1, 2), batch=2, reduction="sum", input_grad=False)
    transposed = replace(case, params={**case.params, "cotangent": {"seed": 2, "layout": "transposed",
                                                                     "zeros": 0.0}})
    verdict = run_check(CHECK, get_target("nn_conv1d"), transposed)
    assert verdict.kind == "fail" and "view size is not compatible" in verdict.message
    assert run_check(CHECK, get_target("nn_conv1d"), case).kind == "pass"


def test_instance_norm_noncontiguous_input_discrepancy_is_real():
    kwargs = {"affine": True, "eps": 1e-5, "seed": 0}
    lay = {"storage_size": 6, "strides": [2, 1, 6, 2], "offset": 0}
    case = plain_case("nn_instance_norm2d", kwargs, (2, 1, 3), batch=1, reduction="sum",
                      layouts=[lay])
    verdict = run_check(CHECK, get_target("nn_instance_norm2d"), case)
    assert verdict.kind == "fail" and "grad of input x" in verdict.message
    assert run_check(CHECK, get_target("nn_instance_norm2d"), replace(case, params={
        **case.params, "layouts": [None]})).kind == "pass"


class _SummedLoss(nn.Module):
    """A module whose output is already a loss over the whole batch
    (vector-quantize's commitment loss): no term per sample."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, z):
        return (self.lin(z) ** 2).mean()


def test_an_output_without_the_batch_dim_is_unsupported_not_a_failure():
    """The loop over samples concatenated 0-dim losses and raised inside
    fuzzdiff ("zero-dimensional tensor cannot be concatenated"), reported as
    the user's failure."""
    import fuzzdiff

    report = fuzzdiff.check(_SummedLoss(), "z: b n 4", checks=["per_sample"], max_examples=10, seed=0,
                            progress=False)
    row = report.row("per_sample")
    assert report.ok and row["failed"] == 0 and row["unsupported"] == row["examples"] > 0, row
