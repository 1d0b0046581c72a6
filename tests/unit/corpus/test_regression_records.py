"""tests/regressions/test_records.py cannot pass on a broken replay: an open
record passes only when the replay is the recorded failure."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import fuzzdiff
from fuzzdiff.corpus.repro import mismatch
from fuzzdiff.verdict import Verdict

REPO = Path(fuzzdiff.__file__).resolve().parents[1]


def _copy(corpus: Path, relative: str, change) -> Path:
    source = next((REPO / "corpus" / relative).glob("*.json"))
    data = json.loads(source.read_text())
    change(data)
    dest = corpus / relative / source.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(data))
    return dest


def test_corrupted_open_records_fail_and_name_themselves(tmp_path):
    corpus = tmp_path / "corpus"

    def rename(data):
        data["target"] = "mse_los"

    def bad_plan(data):
        data["params"]["levels"][0]["in_dims"] = [7, 7]

    def other_exception(data):
        data["verdict"]["errors"]["exception"] = "ValueError"

    def other_message(data):  # the same exception type, another error
        data["verdict"]["message"] = "raised RuntimeError: Expected all tensors to be on the same device"

    def fixed_but_fails(data):  # fixed with no release named: fixed in every torch, this one included
        data["status"] = "fixed"
        data.pop("fixed_in", None)

    broken = [_copy(corpus, "vmap/mse_loss", rename), _copy(corpus, "vmap/huber_loss", bad_plan),
              _copy(corpus, "grad/clamp_tensor_broadcast", other_exception),
              _copy(corpus, "gradgrad/clamp_tensor_broadcast", other_message),
              _copy(corpus, "layout/clamp_tensor_broadcast", fixed_but_fails)]
    shutil.copytree(REPO / "corpus" / "vmap" / "roll", corpus / "vmap" / "roll")  # intact
    env = {**os.environ, "FUZZDIFF_CORPUS": str(corpus)}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          str(REPO / "tests" / "regressions" / "test_records.py")],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    assert "5 failed, 1 passed" in out, out[-4000:]
    assert "xfail" not in out
    for path in broken:
        assert path.stem in out


def test_a_replay_that_passes_with_no_message_is_named_not_an_error():
    assert mismatch(Verdict("fail", "grad: off"), Verdict("pass", "")) == "recorded fail, replayed pass: "


def _raised(message: str) -> Verdict:
    return Verdict("fail", f"raised RuntimeError: {message}", {"exception": "RuntimeError"})


def test_an_error_whose_message_a_later_torch_extends_is_the_same_error():
    recorded = _raised("/build/RegisterCPU_3.cpp:5710: SymIntArrayRef expected to contain only concrete integers")
    longer = _raised(
        "/build/RegisterCPU_3.cpp:5745: SymIntArrayRef expected to contain only concrete integers"
        " that are stored inline. Found symbolic SymInt at index 1"
    )
    assert mismatch(recorded, longer) is None
    # a message the replay cut short, or another error of the same type, is not the recorded one
    assert mismatch(longer, recorded) is not None
    assert mismatch(recorded, _raised("/build/RegisterCPU_3.cpp:5745: expected a concrete size")) is not None


def test_a_few_words_do_not_stand_for_any_message_that_starts_with_them():
    assert mismatch(_raised("shape"), _raised("shape '[2]' is invalid for input of size 3")) is not None
