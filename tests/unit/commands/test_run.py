"""``fuzzdiff run`` (fuzzdiff.commands.run): its table, report, output and flags, over a campaign
in worker processes.

The targets (tests/unit/fdcampaign.py) live in a module written to a
temporary directory, importable by the workers; the command is given them in
place of its own selection (``_select_pairs``).
"""

import json
import os
import re
from pathlib import Path

import pytest
from tests.unit.fdcampaign import campaign, installed

from fuzzdiff import cli
from fuzzdiff.campaign.loop import run_campaign
from fuzzdiff.checks import get_check
from fuzzdiff.commands import run


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    with installed(tmp_path_factory.mktemp("zoo")) as module:
        yield module


def _row(out: str, check: str) -> list[int]:
    line = next(l for l in out.splitlines() if re.match(rf"\W*{check}\W", l))
    return [int(n) for n in re.findall(r"\d+", line)]


def test_a_campaign_reports_counts_failures_and_a_crash_and_goes_on(zoo, tmp_path, monkeypatch, capsys):
    grad, layout = get_check("grad"), get_check("layout")
    pairs = [(zoo.ABORT, grad), (zoo.BAD, grad), (zoo.KNOWN, grad), (zoo.SIN, grad), (zoo.EXP, grad),
             (zoo.TANH, grad), (zoo.SIN, layout), (zoo.EXP, layout)]
    monkeypatch.setattr(run, "_select_pairs", lambda args, notes=None: pairs)
    monkeypatch.setenv("FUZZDIFF_VARIANTS", "2")
    corpus, report = tmp_path / "corpus", tmp_path / "report"
    rc = cli.main(["run", "--jobs", "2", "--max-examples", "6", "--seed", "3", "--corpus", str(corpus),
                   "--report", str(report)])
    out = capsys.readouterr().out
    assert rc == 1

    pairs_run = {(p["target"], p["check"]): p for p in json.loads((report / "results.json").read_text())["pairs"]}
    assert len(pairs_run) == 8  # the crash did not stop the others
    crash = pairs_run[("aborting", "grad")]
    assert crash["crashed"] and crash["new_records"] == 1 and "SIGABRT" in crash["message"]
    bad = pairs_run[("planted_square", "grad")]
    assert bad["failed"] and bad["counts"]["fail"] >= 1 and bad["new_records"] == 1
    known = pairs_run[("known_square", "grad")]
    assert known["known"] and not known["failed"] and known["counts"]["known"] >= 1
    assert "fail" not in known["counts"] and known["new_records"] == 0
    for key in [("cheap_sin", "grad"), ("cheap_exp", "grad"), ("cheap_tanh", "grad"),
                ("cheap_sin", "layout"), ("cheap_exp", "layout")]:
        p = pairs_run[key]
        assert not p["failed"] and p["examples"] > 0 and p["counts"] == {"pass": p["examples"]}, p

    records = [json.loads(p.read_text()) for p in corpus.glob("grad/*/*.json")]
    crash_record, = [r for r in records if r["verdict"]["kind"] == "crash"]
    assert "SIGABRT" in crash_record["verdict"]["message"]  # how the worker died is the evidence
    assert sorted((r["target"], r["verdict"]["kind"]) for r in records) == [
        ("fd_campaign_zoo:ABORT", "crash"), ("fd_campaign_zoo:BAD", "fail")]
    assert not list((corpus / ".inflight").glob("*.json"))

    # the table: check, coverage (covered/applicable), batches, examples, passed, failed,
    # unsupported, inconclusive, crashed, known, new records, failing pairs PyTorch's and yours, and
    # those localized (the planted wrong rule: fuzzdiff.search.localize); one round without a budget
    grads = [p for (t, c), p in pairs_run.items() if c == "grad"]
    assert all(p["batches"] == 1 for p in pairs_run.values())
    count = lambda k: sum(p["counts"].get(k, 0) for p in grads)  # noqa: E731
    assert _row(out, "grad") == [6, 6, 6, sum(p["examples"] for p in grads), count("pass"), count("fail"),
                                 0, 0, 1, count("known"), 2, 0, 1, 1]
    layouts = [p for (t, c), p in pairs_run.items() if c == "layout"]
    assert _row(out, "layout") == [2, 2, 2, sum(p["examples"] for p in layouts),
                                   sum(p["examples"] for p in layouts), 0, 0, 0, 0, 0, 0, 0, 0, 0]
    assert "whose: in your code" in out
    assert "new crash record" in out and "new record" in out and "known discrepancy, grad known_square" in out
    # the new records as root causes, a line each with its records: the crash, and the wrong backward
    assert "new root causes: 2 (2 new records)" in out
    lines = out.split("new root causes:")[1].splitlines()[1:3]
    assert sorted(line.split()[0] for line in lines) == ["crash", "silent"]
    assert all(any(r["id"] in line for r in records) for line in lines)
    assert (report / "heatmap.png").exists() and "planted_square" in (report / "heatmap.html").read_text()


@pytest.mark.parametrize("argv, message", [
    (["--device", "cuda"], "no CUDA device"),
    (["--device", "tpu"], "expected cpu or cuda"),
    (["--dtypes", "int64"], "non-floating"),
    (["--jobs", "0"], "--jobs must be at least 1"),
    (["--dtypes", "float16", "--targets", "sin", "--checks", "dtype"], "takes float16"),
    (["--shard", "3/2", "--targets", "sin"], "expected I/N"),
    (["--rounds", "0"], "--rounds must be at least 1"),
    (["--budget", "nan"], "--budget must be positive"),
    (["--batch-seconds", "0"], "--batch-seconds must be positive"),
    (["--variants", "0"], "--variants must be at least 1"),
])
def test_usage_errors_exit_2(argv, message, capsys, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.main(["run", *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_bad_setting_in_the_environment_is_a_usage_error_that_names_it(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("FUZZDIFF_TIMEOUT", "soon")
    assert cli.main(["run", "--targets", "sin", "--checks", "grad"]) == 2
    assert "$FUZZDIFF_TIMEOUT must be a number of seconds, got 'soon'" in capsys.readouterr().err
    assert cli.main(["corpus", "stats", "--corpus", str(tmp_path)]) == 0  # a corpus given: no setting read


def test_ray_without_its_package_is_a_usage_error(capsys, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError, as where it is not installed
    assert cli.main(["run", "--ray", "--targets", "sin", "--checks", "grad"]) == 2
    assert "pip install 'fuzzdiff[cluster]'" in capsys.readouterr().err


def test_sigterm_ends_a_run_without_crash_records(zoo, tmp_path):
    """A cancelled CI job: the workers stop, and their cases in flight are not crashes."""
    import os
    import signal
    import subprocess
    import sys
    import time
    corpus = tmp_path / "corpus"
    code = ("import sys, fd_campaign_zoo\n"
            "from fuzzdiff import cli\n"
            "from fuzzdiff.commands import run\n"
            "from fuzzdiff.checks import get_check\n"
            "run._select_pairs = lambda args, notes=None: [(fd_campaign_zoo.SLUGGISH, get_check('grad'))] * 1\n"
            "sys.exit(cli.main(['run', '--jobs', '1', '--max-examples', '1000', '--db', '',"
            f" '--corpus', {str(corpus)!r}]))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list((corpus / ".inflight").glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.2)  # until the worker is in the middle of an example
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    from fuzzdiff.record.journal import recover
    assert not list((corpus / ".inflight").glob("*.json"))  # the worker's entry was forgotten
    assert recover(corpus) == [] and not list(corpus.glob("*/*/*.json"))


def test_a_worker_runs_at_the_settings_the_command_resolved_and_its_environment_is_never_written(
        zoo, tmp_path, monkeypatch, capsys):
    """The command reads $FUZZDIFF_TIMEOUT, $FUZZDIFF_CORPUS and
    $HYPOTHESIS_STORAGE_DIRECTORY, set after the workers' forkserver started
    (so no fork hands them down), and its workers run at them: the hang's
    verdict carries the limit, the records land in that corpus, Hypothesis
    keeps its files in that storage. A variable that only the parent has stays
    out of the workers' environment, and the parent's is as it was."""
    grad = get_check("grad")
    run_campaign([(zoo.SIN, grad)], campaign(batch_examples=1, variants=1, jobs=1))  # forkserver up
    corpus, storage = tmp_path / "corpus", tmp_path / "fd_zoo_storage"
    monkeypatch.setenv("FUZZDIFF_TIMEOUT", "1")
    monkeypatch.setenv("FUZZDIFF_CORPUS", str(corpus))
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(storage))
    monkeypatch.setenv("FUZZDIFF_TEST_MARK", "the parent's alone")
    pairs = [(zoo.ENV_PROBE, grad), (zoo.BAD, grad), (zoo.SLOW, grad)]
    monkeypatch.setattr(run, "_select_pairs", lambda args, notes=None: pairs)
    before = dict(os.environ)
    rc = cli.main(["run", "--jobs", "1", "--max-examples", "4", "--variants", "1", "--seed", "1", "--db", "",
                   "--report", str(tmp_path / "report")])
    capsys.readouterr()
    assert dict(os.environ) == before
    assert rc == 1
    results = {p["target"]: p for p in json.loads((tmp_path / "report" / "results.json").read_text())["pairs"]}
    probe = results["env_probe"]  # exit status 3: its environment was written; 4: not that storage
    assert not probe["crashed"] and probe["counts"] == {"pass": probe["examples"]}, probe
    records = {r["target"]: r for r in map(json.loads, map(Path.read_text, corpus.glob("grad/*/*.json")))}
    assert sorted(records) == ["fd_campaign_zoo:BAD", "fd_campaign_zoo:SLOW"]
    assert records["fd_campaign_zoo:SLOW"]["verdict"]["kind"] == "timeout"
    assert records["fd_campaign_zoo:SLOW"]["verdict"]["errors"]["timeout"] == 1.0
