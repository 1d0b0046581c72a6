"""OpInfo records store their sample's call (``opinfo_sample``): they rebuild the
same target under any torch, however its sample list changed, load without
running code, and write torch-only scripts."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, find, settings
from torch.utils._pytree import tree_flatten

from fuzzdiff.checks import CHECKS
from fuzzdiff.record.files import read_record, write_record
from fuzzdiff.record.format import CorpusError
from fuzzdiff.corpus.repro import load, replay
from fuzzdiff.search.runner import case_strategy
from fuzzdiff.script import standalone_script
from fuzzdiff.targets import get_target
from fuzzdiff.targets.opinfo import adapter as opinfo
from fuzzdiff.targets.stored_sample import Fuzzed, SampleError, StoredSample
from fuzzdiff.verdict import Verdict

CORPUS = Path(__file__).parents[3] / "corpus"
GROUP_NORM = CORPUS / "vmap" / "opinfo_nn.functional.group_norm_20" / "ce660369f65928bc.json"


def first_target(key):
    op = next(o for o in opinfo.op_db() if opinfo.op_key(o) == key)
    return opinfo.op_targets(op)[0]


def through_json(stored: StoredSample) -> StoredSample:
    return StoredSample.from_json(json.loads(json.dumps(stored.to_json(), sort_keys=True)))


def outputs(target, xs):
    with torch.no_grad():
        return [o for o in tree_flatten(target.fn(*[x.clone() for x in xs]))[0] if isinstance(o, torch.Tensor)]


def same_target(a, b):
    return (a.name, a.spec, a.dtypes, a.distinct, dict(a.sample), dict(a.skip), dict(a.tolerances), a.known) == (
        b.name, b.spec, b.dtypes, b.distinct, dict(b.sample), dict(b.skip), dict(b.tolerances), b.known)


# -- the stored sample ------------------------------------------------------------------------

@pytest.mark.parametrize("key, what", [
    ("nn.functional.group_norm", "kwargs with constant tensors"),
    ("masked.logaddexp", "a gradcheck wrapper of its own"),
    ("linalg.det", "near mode: the arguments perturb the sample"),
    ("linalg.eig", "the sample's own output processing"),
    ("native_layer_norm", "outputs autograd does not differentiate left out"),
    ("__getitem__", "slices"),
])
def test_a_stored_sample_round_trips_and_rebuilds_the_same_target(key, what):
    target = first_target(key)
    stored = opinfo.stored_sample(target)
    assert {"linalg.det": stored.near, "linalg.eig": stored.output == "processed",
            "native_layer_norm": stored.keep is not None}.get(key, True), what
    again = through_json(stored)
    assert again.to_json() == stored.to_json(), what
    rebuilt = opinfo.get_opinfo_target(target.ref, again)
    assert rebuilt is not target and same_target(rebuilt, target), what
    at = [v + 0.25 * torch.ones_like(v) if not stored.near else torch.full_like(v, 1e-4) for v in target.fn.values]
    for x, y in zip(outputs(target, at), outputs(rebuilt, at), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert torch.equal(x, y) or key == "linalg.eig", what  # eig: eigenvector signs may differ run to run


def test_the_stored_call_marks_the_fuzzed_arguments_and_keeps_the_constants():
    target = first_target("nn.functional.group_norm")
    stored = opinfo.stored_sample(target)
    markers, _ = tree_flatten(stored.call)
    assert [m.index for m in markers if isinstance(m, Fuzzed)] == list(range(len(target.args)))
    assert [tuple(t.shape) for t in stored.fuzzed] == [tuple(d.size for d in a.dims) for a in target.args]
    assert all(torch.equal(a, b) for a, b in zip(stored.fuzzed, target.fn.values))
    assert (stored.op, stored.variant, stored.output, stored.near) == (
        "nn.functional.group_norm", "", "identity", False)


def test_output_processing_that_is_code_is_found_again_by_the_samples_arguments():
    target = first_target("linalg.eig")
    stored = through_json(opinfo.stored_sample(target))
    assert stored.output == "processed"
    moved = StoredSample(**{**stored.__dict__, "index": 10_000})  # no such sample: found by its arguments
    rebuilt = opinfo.get_opinfo_target(target.ref, moved)
    assert rebuilt.fn.output_fn.__code__ is target.fn.output_fn.__code__  # the sample's own, drawn again
    other = StoredSample(**{**stored.__dict__, "fuzzed": tuple(t + 1 for t in stored.fuzzed)})
    with pytest.raises(opinfo.OpInfoError, match="none of the .* samples .* has the stored arguments"):
        opinfo.get_opinfo_target(target.ref, other)


def test_a_sample_whose_last_bits_another_cpu_rounds_otherwise_is_found_again():
    # linalg.eig's samples are products of matrices: another CPU's kernels move their last bits
    target = first_target("linalg.eig")
    stored = through_json(opinfo.stored_sample(target))
    rounded = StoredSample(**{**stored.__dict__, "index": 10_000,
                              "fuzzed": tuple(t * (1 + 2.0**-51) for t in stored.fuzzed)})
    assert not all(torch.equal(a, b) for a, b in zip(rounded.fuzzed, stored.fuzzed))
    rebuilt = opinfo.get_opinfo_target(target.ref, rounded)
    assert rebuilt.fn.output_fn.__code__ is target.fn.output_fn.__code__


def test_a_stored_sample_of_another_op_is_refused():
    stored = opinfo.stored_sample(first_target("nn.functional.group_norm"))
    with pytest.raises(opinfo.OpInfoError, match="stored sample is a call of OpInfo 'nn.functional.group_norm'"):
        opinfo.get_opinfo_target(first_target("linalg.det").ref, stored)


# -- records --------------------------------------------------------------------------------

def copy_record(src: Path, dest: Path, edit=None) -> Path:
    data = json.loads(src.read_text())
    if edit is not None:
        edit(data)
    folder = dest / src.parent.parent.name / src.parent.name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / src.name
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path


def test_committed_opinfo_records_carry_their_sample():
    paths = sorted(CORPUS.glob("*/opinfo_*/*.json"))
    assert paths
    for path in paths:
        record = read_record(path)
        assert record.opinfo_sample is not None, path
        assert record.opinfo_sample.key == record.target.removeprefix("opinfo/").rpartition("@")[0], path


def test_a_record_whose_sample_index_is_gone_still_rebuilds(tmp_path):
    def elsewhere(data):  # as if torch's list had changed: the index names no sample any more
        data["target"] = "opinfo/nn.functional.group_norm@9999"
        data["opinfo_sample"]["index"] = 9999

    moved = copy_record(GROUP_NORM, tmp_path, elsewhere)
    record, target = load(moved)
    assert target.name == "nn.functional.group_norm@9999"
    assert target.fn.op.name == "nn.functional.group_norm"
    assert replay(moved).kind == replay(GROUP_NORM).kind

    def no_sample(data):
        elsewhere(data)
        del data["opinfo_sample"]

    with pytest.raises(CorpusError, match="field 'target': cannot be rebuilt here: .* no target for sample 9999"):
        load(copy_record(GROUP_NORM, tmp_path / "bare", no_sample))


def test_a_written_record_stores_its_sample(tmp_path):
    target = first_target("nn.functional.group_norm")
    case = find(case_strategy(CHECKS["grad"], target), lambda c: True,
                settings=settings(database=None, derandomize=True, suppress_health_check=list(HealthCheck)))
    path, created = write_record(tmp_path, "grad", case, Verdict("fail", "planted"))
    assert created
    written = read_record(path)
    assert written.opinfo_sample is not None
    assert written.opinfo_sample.to_json() == opinfo.stored_sample(get_target(target.ref)).to_json()
    assert load(path)[1].name == target.name
    # a record of another target has none
    case = read_record(next(CORPUS.glob("grad/*/*.json"))).case
    other, _ = write_record(tmp_path, "grad", case, Verdict("fail", "planted"))
    assert read_record(other).opinfo_sample is None and "opinfo_sample" not in json.loads(other.read_text())


@pytest.mark.parametrize("edit, field, why", [
    (lambda s: s["call"]["tuple"][2]["dict"].append(["x", {"object": "os:system"}]),
     "opinfo_sample.call[2].x", "'object' is not a kind of value a record stores"),
    (lambda s: s["call"]["tuple"][2]["dict"].append(["x", {"dtype": "_dynamo"}]),
     "opinfo_sample.call[2].x", "dtype '_dynamo'; expected one of"),
    (lambda s: s["call"]["tuple"][2]["dict"].append(["x", {"float": "1.5"}]),
     "opinfo_sample.call[2].x", "'1.5' is not a float.hex string"),
    (lambda s: s["call"]["tuple"].__setitem__(0, {"arg": 1}),
     "opinfo_sample.call", "markers are [1]; expected each of 0..0 once, in order"),
    (lambda s: s["fuzzed"][0]["data"].pop(), "opinfo_sample.fuzzed[0].data", "must be a list of"),
    (lambda s: s["fuzzed"][0].update(strides=[0, 0]), "opinfo_sample.fuzzed[0].strides", "leave gaps or overlap"),
    (lambda s: s.update(keep="all"), "opinfo_sample.keep", "must be null or a list of booleans"),
    (lambda s: s.update(output="lambda x: x"), "opinfo_sample.output", "expected one of"),
    (lambda s: s.update(op="linalg.det"), "opinfo_sample.op", "a call of 'linalg.det'"),
    (lambda s: s.pop("near"), "opinfo_sample.near", "missing"),
])
def test_a_malformed_stored_sample_is_an_error_naming_the_record_and_field(tmp_path, edit, field, why):
    path = copy_record(GROUP_NORM, tmp_path, lambda data: edit(data["opinfo_sample"]))
    with pytest.raises(CorpusError) as raised:
        read_record(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: field {field!r}") and why in message, message


def test_the_sample_codec_refuses_what_it_cannot_store_exactly():
    x = (torch.zeros(2, dtype=torch.float64),)
    with pytest.raises(SampleError, match=r"call\[1\]\[0\]: a object"):
        StoredSample("add", "", 0, (Fuzzed(0), (object(),), {}), x, False).to_json()
    with pytest.raises(SampleError, match="at most 4096"):
        StoredSample("add", "", 0, (Fuzzed(0), (torch.zeros(5000),), {}), x, False).to_json()
    gapped = torch.zeros(4, dtype=torch.float64)[::2]
    with pytest.raises(SampleError, match="leave gaps or overlap"):  # near mode adds it as it is: exactly or not at all
        StoredSample("add", "", 0, (Fuzzed(0), (), {}), (gapped,), True).to_json()
    assert "strides" not in StoredSample("add", "", 0, (Fuzzed(0), (), {}), (gapped,), False).to_json()["fuzzed"][0]


LOAD_ONLY = """
import sys
from fuzzdiff.record.files import read_record
from fuzzdiff.record.format import CorpusError
record = read_record(sys.argv[1])
assert record.opinfo_sample is not None
try:
    read_record(sys.argv[2])
except CorpusError as e:
    print("refused:", e)
print(sorted(m for m in sys.modules if m.startswith(("torch.testing._internal.common_methods", "expecttest",
                                                    "torch._dynamo", "fuzzdiff.targets.opinfo."))))
"""


def test_loading_a_record_imports_and_runs_nothing(tmp_path):
    evil = copy_record(GROUP_NORM, tmp_path, lambda d: d["opinfo_sample"]["call"]["tuple"][2]["dict"].append(
        ["x", {"dtype": "_dynamo"}]))  # torch.__getattr__("_dynamo") would import it
    done = subprocess.run([sys.executable, "-c", LOAD_ONLY, str(GROUP_NORM), str(evil)],
                          capture_output=True, text=True, check=True)
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("refused:") and "opinfo_sample.call[2].x" in lines[0]
    assert lines[-1] == "[]"  # no op_db, no expecttest, no dynamo, nothing of the OpInfo wing


# -- scripts --------------------------------------------------------------------------------

def script_of(path: Path) -> str:
    record, target = load(path)
    return standalone_script(record.check, record.case, record.verdict, target=target, found_with=record.found_with)


@pytest.mark.parametrize("path, how", [
    (GROUP_NORM, "    torch.nn.functional.group_norm,\n"),
    (CORPUS / "forward" / "opinfo_cholesky_inverse_11" / "61f1feccb8aaa4f2.json",
     "functools.partial(OPINFO.gradcheck_wrapper, OPINFO.op)"),
])
def test_an_opinfo_record_writes_a_torch_only_script_that_agrees_with_its_replay(tmp_path, path, how):
    script = script_of(path)
    assert how in script and not re.search(r"^\s*(import|from) (fuzzdiff|strategies|hypothesis)\b", script, re.M)
    (tmp_path / "repro.py").write_text(script)
    ran = subprocess.run([sys.executable, str(tmp_path / "repro.py")], capture_output=True, text=True, cwd=tmp_path)
    failed = replay(path).failed
    assert (ran.returncode != 0) == failed, ran.stdout[-2000:] + ran.stderr[-2000:]
    if failed and read_record(path).verdict.errors.get("exception"):
        assert read_record(path).verdict.errors["exception"] in ran.stderr.strip().splitlines()[-1]


def test_a_moved_sample_writes_the_same_script(tmp_path):
    moved = copy_record(GROUP_NORM, tmp_path, lambda d: d["opinfo_sample"].update(index=9999))
    assert script_of(moved) == script_of(GROUP_NORM)  # the index is a hint: the call is the stored one


def test_a_fresh_process_replays_an_opinfo_record_from_its_stored_sample(tmp_path):
    """fuzzdiff.search.fresh reruns as repro.load does: the stored call, whatever the index."""
    from fuzzdiff.search.fresh import _rerun

    def elsewhere(data):
        data["target"] = "opinfo/nn.functional.group_norm@9999"
        data["opinfo_sample"]["index"] = 9999

    moved = copy_record(GROUP_NORM, tmp_path, elsewhere)
    assert _rerun(str(moved))["verdict"]["kind"] == replay(GROUP_NORM).kind
