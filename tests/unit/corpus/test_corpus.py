"""Corpus records: exact round trips, concurrent writers, replay, promotion, bad input."""

from __future__ import annotations

import json
import multiprocessing
import pickle
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.cli import main
from fuzzdiff.config import FuzzConfig
from fuzzdiff.record.files import iter_records, read_record, write_record
from fuzzdiff.search.fuzzing import FuzzFailure, fuzz
from fuzzdiff.case.layout import Alias, Layout
from fuzzdiff.record.format import INLINE_LIMIT, CorpusError
from fuzzdiff.corpus.repro import replay
from fuzzdiff.case.values import Values
from fuzzdiff.verdict import Verdict

FAIL = Verdict("fail", "planted", {"abs_error": 1.0, "scale": 2.0})

PLANTED = '''
import torch
from fuzzdiff.targets.target import Target

FIXED = False


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        if not FIXED:  # the bug: reads x as if it were laid out contiguously
            x = x.as_strided(x.shape, torch.empty(x.shape).stride(), x.storage_offset())
        return 2 * g * x


TARGET = Target("planted_square", Square.apply, "x: n m", origin="planted_square:TARGET")
'''

FAST = settings(max_examples=60, derandomize=True, database=None, deadline=None,
                suppress_health_check=list(HealthCheck))


def tensors_equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(x.dtype == y.dtype and x.shape == y.shape and x.stride() == y.stride()
               and torch.equal(x.view(torch.uint8) if x.dtype == torch.bool else x,
                               y.view(torch.uint8) if y.dtype == torch.bool else y)
               for x, y in zip(a, b))


def strided_case(target: str = "mul", dtype: str = "float64", shape=(3, 4), seed: int = 7) -> Case:
    """Two arguments: a transposed one at a storage offset, and an alias of its storage."""
    n, m = shape
    lay = Layout(n * m + 5, (1, n), 5)
    return Case(target, (Arg(shape, Values(seed=seed, specials=((1, "-0"), (2, "subnormal"))), lay),
                         Arg(shape, Values(seed=seed + 1), Layout(n * m + 5, (m, 1), 0), Alias(0, "view"))),
                dtype)


# -- exact round trips -------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16", "complex64"])
def test_record_replays_bit_for_bit(tmp_path, dtype):
    case = strided_case(dtype=dtype)
    path, created = write_record(tmp_path, "grad", case, FAIL)
    assert created and path.parent == tmp_path / "grad" / "mul"
    back = read_record(path).case
    assert back.data, "the record must pin the values it stored"
    assert tensors_equal(case.materialize().args, back.materialize().args)
    assert back.to_json() == case.to_json()


def test_large_storage_goes_to_safetensors(tmp_path):
    case = strided_case(shape=(70, 60))
    path, _ = write_record(tmp_path, "grad", case, FAIL)
    stored = json.loads(path.read_text())["inputs"][0]["storage"]
    assert stored["numel"] > INLINE_LIMIT and "data" not in stored
    assert (path.parent / stored["file"]).exists()
    assert tensors_equal(case.materialize().args, read_record(path).case.materialize().args)


def test_pinned_values_win_over_the_seed(tmp_path):
    """A torch whose generator changed still replays the stored values."""
    case = strided_case()
    path, _ = write_record(tmp_path, "grad", case, FAIL)
    data = json.loads(path.read_text())
    data["inputs"][0]["values"]["seed"] = 12345  # as if the generator now gave other values
    path.write_text(json.dumps(data))
    assert tensors_equal(case.materialize().args, read_record(path).case.materialize().args)


def test_loading_never_unpickles(tmp_path, monkeypatch):
    path, _ = write_record(tmp_path, "grad", strided_case(shape=(70, 60)), FAIL)

    def refuse(*args, **kwargs):
        raise AssertionError("a corpus record was unpickled")
    for module, name in ((pickle, "load"), (pickle, "loads"), (torch, "load")):
        monkeypatch.setattr(module, name, refuse)
    assert read_record(path).case.materialize().args


def test_same_signature_is_one_record(tmp_path):
    first, created = write_record(tmp_path, "grad", strided_case(seed=1), FAIL)
    again, created_again = write_record(tmp_path, "grad", strided_case(seed=2), FAIL)
    assert created and not created_again and first == again
    other, created_other = write_record(tmp_path, "grad", strided_case(seed=1, dtype="float32"), FAIL)
    assert created_other and other != first
    assert len(list(iter_records(tmp_path))) == 2


# -- concurrent writers ------------------------------------------------------------------

def _writer(root: str, k: int, barrier, results) -> None:
    barrier.wait()
    out = []
    for i in range(3):  # the same three records in every process, one with a data file
        out.append(write_record(root, "grad", strided_case("shared%d" % i, shape=(70, 60) if i == 0 else (3, 4),
                                                           seed=100 * k + i), FAIL))
    for i in range(2):  # and two of its own
        out.append(write_record(root, "grad", strided_case(f"own{k}_{i}"), FAIL))
    results.put([(str(p), c) for p, c in out])


def test_concurrent_writers_lose_and_tear_nothing(tmp_path):
    ctx = multiprocessing.get_context("fork")
    n = 6
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), k, barrier, results)) for k in range(n)]
    for p in procs:
        p.start()
    written = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    created = {}
    for per_process in written:
        for path, c in per_process:
            created[path] = created.get(path, 0) + c
    assert len(created) == 3 + 2 * n
    assert all(count == 1 for count in created.values()), "each record is created exactly once"
    records = [read_record(p) for p in iter_records(tmp_path)]  # every one parses whole
    assert len(records) == 3 + 2 * n
    assert not list(tmp_path.rglob("*.tmp")), "no temporary file is left behind"
    data_files = list(tmp_path.rglob("*.safetensors"))
    assert len(data_files) == 1, "losers of the race remove their data files"
    for r in records:  # the stored values are those of the case the record describes
        assert tensors_equal(r.case.materialize().args,
                             replace(r.case, data={}).materialize().args)


# -- replay, scripts and promotion ---------------------------------------------------------

@pytest.fixture
def planted(importable):
    return importable("planted_square", PLANTED)


def test_found_bug_replays_and_promotes(planted, tmp_path, capsys):
    with pytest.raises(FuzzFailure) as info:
        fuzz("grad", planted.TARGET, FuzzConfig(corpus=tmp_path / "corpus", variants=2, structures=1), settings=FAST)
    path = info.value.record_path
    assert info.value.record_created and path.exists()
    record = read_record(path)
    assert record.target == "planted_square:TARGET" and record.check == "grad"

    assert main(["repro", str(path)]) == 1
    out = capsys.readouterr().out
    assert "reproduced" in out and "did not" not in out
    assert replay(path).failed

    assert main(["corpus", "promote", record.id[:8], "--corpus", str(tmp_path / "corpus"),
                 "--to", str(tmp_path / "regressions")]) == 0
    test_file, = (tmp_path / "regressions").glob("test_grad_planted_square_*.py")
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)]
    env_path = f"{tmp_path}"
    import os
    env = {**os.environ, "PYTHONPATH": env_path}
    present = subprocess.run(run, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert present.returncode == 1, present.stdout + present.stderr
    (tmp_path / "planted_square.py").write_text(PLANTED.replace("FIXED = False", "FIXED = True"))
    fixed = subprocess.run(run, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr

    planted.FIXED = True
    assert main(["repro", str(path)]) == 0
    assert "did not reproduce" in capsys.readouterr().out


def test_corpus_replay_says_what_each_record_shows_and_marks_the_fixed(planted, tmp_path, capsys, monkeypatch):
    corpus = tmp_path / "corpus"
    with pytest.raises(FuzzFailure) as info:
        fuzz("grad", planted.TARGET, FuzzConfig(corpus=corpus, variants=2, structures=1), settings=FAST)
    path = info.value.record_path
    assert main(["corpus", "replay", "--corpus", str(corpus)]) == 0
    assert "still failing" in capsys.readouterr().out

    planted.FIXED = True  # upstream's fix, as of this torch
    assert main(["corpus", "replay", "--corpus", str(corpus), "--status", "open", "--mark"]) == 0
    out = capsys.readouterr().out
    assert f"fixed             grad/planted_square:TARGET {path.stem}" in out
    release = torch.__version__.split("+")[0]
    record = read_record(path)
    assert (record.status, record.fixed_in) == ("fixed", release) and record.status_on() == "fixed"
    # on a torch before that release the record is still open: its failure is expected there
    assert record.status_on("2.0.0") == "open"
    assert main(["corpus", "replay", "--corpus", str(corpus)]) == 0
    assert "still fixed" in capsys.readouterr().out

    planted.FIXED = False  # the fix undone: news, and --mark opens the record again
    assert main(["corpus", "replay", "--corpus", str(corpus), "--mark"]) == 1
    assert "back" in capsys.readouterr().out
    assert read_record(path).status == "open" and read_record(path).fixed_in is None


def test_a_fixed_in_that_is_no_release_or_on_an_open_record_is_refused(tmp_path):
    path, _ = write_record(tmp_path, "grad", strided_case(), FAIL)
    data = json.loads(path.read_text())
    for status, fixed_in, message in [("fixed", "soon", "torch release"), ("open", "2.14.1", "belongs to a 'fixed'")]:
        path.write_text(json.dumps({**data, "status": status, "fixed_in": fixed_in}))
        with pytest.raises(CorpusError, match=message):
            read_record(path)


def test_corpus_commands(tmp_path, capsys):
    path, _ = write_record(tmp_path, "grad", strided_case(), FAIL)
    assert main(["corpus", "list", "--corpus", str(tmp_path)]) == 0
    assert read_record(path).id in capsys.readouterr().out
    assert main(["corpus", "stats", "--corpus", str(tmp_path)]) == 0
    assert "grad" in capsys.readouterr().out
    assert main(["corpus", "show", path.stem[:6], "--corpus", str(tmp_path)]) == 0
    shown = capsys.readouterr().out
    assert "storage offset 5" in shown and "a view sharing storage with arg 0" in shown


# -- bad input -------------------------------------------------------------------------------

def _break(data: dict, how: str) -> str | dict:
    if how == "missing field":
        del data["check"]
    elif how == "unknown format":
        data["format"] = 99
    elif how == "unknown target":
        data["target"] = "no_such_op"
    elif how == "bad shape":
        data["inputs"][0]["shape"] = "3x4"
    elif how == "bad data":
        data["inputs"][0]["storage"]["data"][0] = "not-a-float"
    elif how == "short data":
        data["inputs"][0]["storage"]["data"].pop()
    elif how == "bad status":
        data["status"] = "wontfix"
    return data


BROKEN = {  # how -> what the message must name
    "malformed": "not valid JSON", "truncated": "not valid JSON", "missing field": "'check'",
    "unknown format": "'format'", "unknown target": "'target'", "bad shape": "inputs[0].shape",
    "bad data": "inputs[0].storage.data", "short data": "inputs[0].storage.data",
    "bad status": "'status'", "missing data file": "inputs[0].storage.file",
}


@pytest.mark.parametrize("how", sorted(BROKEN))
def test_bad_record_is_a_clear_error(tmp_path, capsys, how):
    path, _ = write_record(tmp_path, "grad", strided_case(shape=(70, 60) if how == "missing data file"
                                                          else (3, 4)), FAIL)
    text = path.read_text()
    if how == "malformed":
        path.write_text("{not json")
    elif how == "truncated":
        path.write_text(text[: len(text) // 2])
    elif how == "missing data file":
        next(path.parent.glob("*.safetensors")).unlink()
    else:
        path.write_text(json.dumps(_break(json.loads(text), how)))
    with pytest.raises(CorpusError):
        replay(path)
    assert main(["repro", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and BROKEN[how] in err, err
    assert "Traceback" not in err


def test_bad_record_from_the_console_script(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"format": 1, "id": "x"')
    done = subprocess.run([sys.executable, "-m", "fuzzdiff", "repro", str(path)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "broken.json" in done.stderr
    assert "Traceback" not in done.stderr


def test_unknown_record_id(tmp_path, capsys):
    assert main(["repro", "deadbeef", "--corpus", str(tmp_path)]) == 2
    assert "no record with id 'deadbeef'" in capsys.readouterr().err


def test_merge_deduplicates_on_id_and_keeps_data_files(tmp_path, capsys):
    a, b, dest = tmp_path / "a", tmp_path / "b", tmp_path / "dest"
    shared = strided_case("shared", shape=(70, 60))  # with a safetensors data file
    write_record(a, "grad", shared, FAIL)
    write_record(b, "grad", replace(shared, data={}), FAIL)
    write_record(a, "grad", strided_case("only_a"), FAIL)
    only_b, _ = write_record(b, "layout", strided_case("only_b"), FAIL)
    (b / "grad" / "broken").mkdir()
    (b / "grad" / "broken" / "0000.json").write_text("{")
    assert main(["corpus", "merge", str(a), str(b), "--corpus", str(dest)]) == 2  # one unreadable
    out, err = capsys.readouterr()
    assert "3 new records, 1 already present" in out and "0000.json" in err
    records = [read_record(p) for p in iter_records(dest)]
    assert sorted(r.target for r in records) == ["only_a", "only_b", "shared"]
    assert tensors_equal(read_record(dest / "layout" / "only_b" / only_b.name).case.materialize().args,
                         strided_case("only_b").materialize().args)
    assert main(["corpus", "merge", str(a), "--corpus", str(dest)]) == 0  # idempotent
    assert "0 new records, 2 already present" in capsys.readouterr().out


def test_two_errors_of_one_pair_are_two_records_and_one_error_at_other_sizes_is_one():
    from fuzzdiff.record.files import _record_id
    from fuzzdiff.record.format import signature
    from fuzzdiff.verdict import Verdict

    case = Case("mse_loss", (Arg((2,)), Arg((2,))))

    def raised(message):
        return Verdict("fail", f"raised RuntimeError: {message}", {"exception": "RuntimeError"})
    size = _record_id(signature("vmap", case, raised("The size of tensor a (4) must match the size of tensor b (2)")))
    other_size = _record_id(signature("vmap", case, raised("The size of tensor a (12) must match the size of tensor b (4)")))
    shape = _record_id(signature("vmap", case, raised("shape '[1, 1]' is invalid for input of size 2")))
    assert size == other_size and size != shape
    value_error = Verdict("fail", "raised ValueError: shape '[1, 1]' is invalid for input of size 2",
                          {"exception": "ValueError"})
    assert _record_id(signature("vmap", case, value_error)) != shape


def test_records_group_into_root_causes_by_known_signature_or_an_automatic_one(tmp_path):
    from fuzzdiff.corpus.causes import root_causes
    from fuzzdiff.targets.known import Known

    def raised(message):
        return Verdict("fail", f"raised RuntimeError: {message}", {"exception": "RuntimeError"})

    plain = Case("opinfo/addmm@3", (Arg((2, 3)),))
    paths = [
        write_record(tmp_path, "grad", plain, raised("shape [2, 3] is invalid for size 5"))[0],
        write_record(tmp_path, "grad", replace(plain, target="opinfo/addmm@7", args=(Arg((4, 1)),)),
                     raised("shape [4, 1] is invalid for size 9"))[0],  # the same error at another size
        write_record(tmp_path, "grad", plain, raised("expected a contiguous tensor"))[0],  # another error
        write_record(tmp_path, "forward", plain, FAIL)[0],
        write_record(tmp_path, "forward", strided_case("kron"), FAIL)[0],
    ]
    records = [read_record(p) for p in paths]
    both = Known(("forward",), "one known bug", "a repro", features=("permuted",),
                 records=(records[3].id, records[4].id))
    causes = root_causes(records, [both])
    assert sorted(len(c.records) for c in causes) == [1, 2, 2]
    known, = [c for c in causes if c.known is both]
    assert {r.id for r in known.records} == {records[3].id, records[4].id} and known.kind == "silent"
    sizes, = [c for c in causes if c.known is None and len(c.records) == 2]
    assert sizes.name.startswith("addmm | grad | RuntimeError") and sizes.kind == "loud"


def test_a_record_reads_as_a_bug_report_with_its_script_and_what_it_prints(tmp_path):
    from fuzzdiff.corpus.bug_report import bug_report, upstream_issues
    from fuzzdiff.corpus.causes import severity
    from fuzzdiff.targets.known import Known
    from fuzzdiff.corpus.repro import load

    record = read_record(Path(__file__).resolve().parents[3] / "corpus" / "vmap" / "squeeze" / "7b67c8fb783e4256.json")
    record, target = load(record)
    text = bug_report(record, target)
    assert severity(record.verdict) == "loud" and text.startswith("### ")
    for part in ("#### To reproduce", "```python", "import torch", f"Its output on torch {torch.__version__}",
                 "#### Expected and actual", "Actual: raised RuntimeError", "#### Related upstream issues",
                 "#### Versions", record.id):
        assert part in text, part
    assert "import fuzzdiff" not in text.split("```python")[1].split("```")[0]  # the script is torch's alone
    assert "(exit status 1)" in text  # the script itself still shows the failure here
    cites = Known("grad", "see pytorch/pytorch#148820 and pytorch/pytorch#148820", "x", message="m")
    assert upstream_issues(cites) == ["pytorch/pytorch#148820"]
