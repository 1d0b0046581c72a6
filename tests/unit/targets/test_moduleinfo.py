"""ModuleInfo targets (fuzzdiff.targets.moduleinfo): torch's module_db as a family,
whose parameters are fuzzed arguments, and whose random modules are seeded alike."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch
from hypothesis import HealthCheck, settings
from torch import nn

from fuzzdiff.checks import CHECKS
from fuzzdiff.config import FuzzConfig
from fuzzdiff.search.fuzzing import FuzzFailure, fuzz
from fuzzdiff.targets import get_target, select
from fuzzdiff.targets.moduleinfo import adapter
from fuzzdiff.targets.moduleinfo.build import build, samples

pytest.importorskip("expecttest")
from torch.testing._internal.common_modules import FunctionInput, ModuleInput  # noqa: E402

SEARCH = settings(max_examples=40, database=None, deadline=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))


def module_info(module_cls, *constructor, input_shape=(4, 3), name="nn.Planted"):
    """A ModuleInfo of one sample, as module_db declares them: ``module_cls(*constructor)`` on
    one float input of ``input_shape``."""

    def inputs(info, device, dtype, requires_grad, training):
        x = torch.rand(input_shape, dtype=dtype, device=device, requires_grad=requires_grad) * 2 - 1
        return [ModuleInput(FunctionInput(*constructor), FunctionInput(x))]

    return SimpleNamespace(name=name, module_cls=module_cls, module_inputs_func=inputs, decorators=(),
                           supports_gradgrad=True, train_and_eval_differ=False, dtypes=(torch.float64,))


def target_of(info, training=True):
    return build(info, 0, samples(info, training)[0], training)


def test_at_least_100_targets_with_parameters_as_arguments():
    targets = adapter.moduleinfo_targets()
    assert len(targets) >= 100
    assert all(t.name.startswith("modules/nn.") and t.family == "moduleinfo" for t in targets)
    lstm = get_target("modules/nn.LSTM_0")
    assert [a.name for a in lstm.args][:2] == ["x0", "weight_ih_l0"]
    assert {"modules/nn.BatchNorm2d_0", "modules/nn.BatchNorm2d_0_eval"} <= {t.name for t in targets}


def test_modules_pattern_selects_the_catalog_modules_and_builds_only_matching_moduleinfos():
    chosen = adapter.select(["modules/nn.GRU_*"])
    assert chosen and all(t.name.startswith("modules/nn.GRU_") for t in chosen)
    assert {"nn_linear"} <= {t.name for t in select(families=["modules"])}


class StorageOrderLinear(nn.Linear):
    """A planted bug: the weight is read from its storage as if it were contiguous
    (a kernel that ignores strides), right only for a contiguous weight."""

    def forward(self, x):
        w = self.weight
        dense = torch.as_strided(w, w.shape, (w.shape[1], 1), w.storage_offset())
        return x @ dense.T + self.bias


def test_a_noncontiguous_weight_reaches_the_module_and_its_bug_is_found():
    seen = []

    class Watched(nn.Linear):
        def forward(self, x):
            seen.append(self.weight.is_contiguous())
            return super().forward(x)

    watched = target_of(module_info(Watched, 3, 2))
    assert "weight" in {a.name for a in watched.args}
    fuzz(CHECKS["layout"], watched, FuzzConfig(variants=1, structures=1), settings=SEARCH)
    assert False in seen  # the layout check drew a noncontiguous weight, and the module saw it
    planted = target_of(module_info(StorageOrderLinear, 3, 3))
    with pytest.raises(FuzzFailure):
        fuzz(CHECKS["layout"], planted, FuzzConfig(variants=1, structures=1), settings=SEARCH)
    right = target_of(module_info(nn.Linear, 3, 3))
    fuzz(CHECKS["layout"], right, FuzzConfig(variants=1, structures=1), settings=SEARCH)


class Dropped(nn.Sequential):
    def __init__(self):
        super().__init__(nn.Linear(3, 3), nn.Dropout(0.5))


_calls = itertools.count()


class UnseededDropout(nn.Module):
    """A planted bug: dropout from a generator of its own, reseeded at every call,
    so that seeding torch's generators alike does not make two calls agree."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def forward(self, x):
        g = torch.Generator().manual_seed(next(_calls))
        keep = torch.rand(x.shape[:-1] + (3,), generator=g, dtype=x.dtype) > 0.5
        return self.linear(x) * keep * 2


def test_dropout_is_seeded_alike_and_an_unseeded_module_is_refused():
    dropped = target_of(module_info(Dropped))
    assert dropped is not None and dropped.random
    assert CHECKS["layout"].why_not(dropped)  # two layouts draw other masks: skipped with its reason
    fuzz(CHECKS["grad"], dropped, FuzzConfig(variants=1, structures=1), settings=SEARCH)  # no false alarm
    assert target_of(module_info(UnseededDropout)) is None


def test_a_norms_running_statistics_meet_a_dual_under_aot_function_as_the_known_captured_constant():
    """nn.BatchNorm1d copies its running statistics afresh per call: tensors the
    call holds, not arguments, which aot_function of forward mode cannot meet
    (JVP_CAPTURED_CONSTANT_AOT_FUNCTION). The campaign reported it as new."""
    import os

    from fuzzdiff.config import default_corpus
    from fuzzdiff.record.files import iter_records, read_record
    from fuzzdiff.targets.discrepancies import JVP_CAPTURED_CONSTANT_AOT_FUNCTION
    from fuzzdiff.targets.known import matching

    record = next(read_record(p) for p in iter_records(default_corpus(os.environ))
                  if read_record(p).id == "3236bd1cd48c2d1e")
    target = get_target(record.case.target)
    assert matching(target.known, record.check, record.case, record.verdict) is JVP_CAPTURED_CONSTANT_AOT_FUNCTION
    assert record.blame["op"] == "aten::native_batch_norm"


@pytest.mark.parametrize("record, shows", [
    ("compile/modules_nn.BatchNorm1d_0/3236bd1cd48c2d1e.json", "INTERNAL ASSERT FAILED"),
    ("compiled_autograd/modules_nn.BatchNorm2d_6_eval/f71374609a7d196c.json", "MISMATCH: grad of x0"),
])
def test_a_moduleinfo_record_writes_a_torch_only_script_that_fails_as_its_replay(tmp_path, record, shows):
    """The script builds the module by its public name and calls it through the
    target's own ModuleCall, copied: its first call may run under a transform."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    from fuzzdiff.corpus.repro import load
    from fuzzdiff.script import standalone_script

    path = Path(__file__).parents[3] / "corpus" / record
    rec, target = load(path)
    script = standalone_script(rec.check, rec.case, rec.verdict, target=target, found_with=rec.found_with)
    assert "torch.nn.BatchNorm" in script and "class ModuleCall" in script
    assert not re.search(r"^\s*(import|from) (fuzzdiff|strategies|hypothesis)\b", script, re.M)
    (tmp_path / "repro.py").write_text(script)
    ran = subprocess.run([sys.executable, str(tmp_path / "repro.py")], capture_output=True, text=True, cwd=tmp_path)
    assert ran.returncode != 0 and shows in ran.stdout + ran.stderr, ran.stdout[-2000:] + ran.stderr[-2000:]
