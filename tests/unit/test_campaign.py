"""``fuzzdiff run``: a campaign in worker processes, its table, budget and crashes.

The targets live in a module written to a temporary directory, importable by
the workers (they are given the parent's sys.path): cheap correct ones, one with a
planted wrong backward, and one that calls os.abort() on any input of two or
more elements, which kills the worker running it.
"""

import json
import os
import re
import textwrap
from pathlib import Path

import pytest

from fuzzdiff import cli, commands
from fuzzdiff.campaign import BatchSize, run_campaign
from fuzzdiff.checks import get_check

ZOO = textwrap.dedent('''
    import os
    import time
    import torch
    from hypothesis.configuration import storage_directory
    from torch.autograd import Function
    from fuzzdiff.known import Known
    from fuzzdiff.targets.target import Target

    class BadSquare(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * g * x  # planted: the derivative of x*x is 2x

    def slow(x):
        time.sleep(30)
        return x.sin()

    def sluggish(x):
        time.sleep(0.2)
        return x.sin()

    def aborting(x):
        if x.numel() >= 2:
            os.abort()
        return x.sin()

    def env_probe(x):
        # dies where the parent's newest variable reached the worker's environment (3), or
        # where Hypothesis's storage is not the one the command resolved (4)
        if "FUZZDIFF_TEST_MARK" in os.environ:
            os._exit(3)
        if storage_directory().path.name != "fd_zoo_storage":
            os._exit(4)
        return x.sin()

    LEAKED = []

    def leaky(x):
        # once per process, leaves inference mode on for good (its guard lives on), which
        # fuzzdiff.torch_state cannot put back: only a fresh process is whole again
        if not LEAKED:
            LEAKED.append(torch.inference_mode())
            LEAKED[-1].__enter__()
        return x.sin()

    def _t(name, fn, attr, **kw):
        return Target(name, fn, "x: n", origin=f"fd_campaign_zoo:{attr}", max_side=3, **kw)

    SIN = _t("cheap_sin", torch.sin, "SIN")
    EXP = _t("cheap_exp", torch.exp, "EXP")
    TANH = _t("cheap_tanh", torch.tanh, "TANH")
    BAD = _t("planted_square", BadSquare.apply, "BAD")
    # a known discrepancy matches its own signature: the wrong value vs finite differences
    PLANTED = Known("grad", "planted, and known", "BadSquare.backward is 3 g x",
                    message=r"^<J\\^T v, u> vs finite differences")
    KNOWN = _t("known_square", BadSquare.apply, "KNOWN", known=(PLANTED,))
    ABORT = _t("aborting", aborting, "ABORT")
    SLOW = _t("slow", slow, "SLOW")
    SLUGGISH = _t("sluggish", sluggish, "SLUGGISH")
    LEAKY = _t("leaky", leaky, "LEAKY")
    ENV_PROBE = _t("env_probe", env_probe, "ENV_PROBE")
    KNOWN_BUT_HANGS = _t("known_but_hangs", slow, "KNOWN_BUT_HANGS", known=(PLANTED,))
''')


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("zoo")
    (folder / "fd_campaign_zoo.py").write_text(ZOO)
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(folder))  # workers get the parent's sys.path
        import fd_campaign_zoo
        yield fd_campaign_zoo


def _row(out: str, check: str) -> list[int]:
    line = next(l for l in out.splitlines() if re.match(rf"\W*{check}\W", l))
    return [int(n) for n in re.findall(r"\d+", line)]


def test_a_campaign_reports_counts_failures_and_a_crash_and_goes_on(zoo, tmp_path, monkeypatch, capsys):
    grad, layout = get_check("grad"), get_check("layout")
    pairs = [(zoo.ABORT, grad), (zoo.BAD, grad), (zoo.KNOWN, grad), (zoo.SIN, grad), (zoo.EXP, grad),
             (zoo.TANH, grad), (zoo.SIN, layout), (zoo.EXP, layout)]
    monkeypatch.setattr(commands, "_select_pairs", lambda args, notes=None: pairs)
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
    # unsupported, inconclusive, crashed, known, new records, failing pairs PyTorch's and yours;
    # one round without a budget
    grads = [p for (t, c), p in pairs_run.items() if c == "grad"]
    assert all(p["batches"] == 1 for p in pairs_run.values())
    count = lambda k: sum(p["counts"].get(k, 0) for p in grads)  # noqa: E731
    assert _row(out, "grad") == [6, 6, 6, sum(p["examples"] for p in grads), count("pass"), count("fail"),
                                 0, 0, 1, count("known"), 2, 0, 1]
    layouts = [p for (t, c), p in pairs_run.items() if c == "layout"]
    assert _row(out, "layout") == [2, 2, 2, sum(p["examples"] for p in layouts),
                                   sum(p["examples"] for p in layouts), 0, 0, 0, 0, 0, 0, 0, 0]
    assert "whose: in your code" in out
    assert "new crash record" in out and "new record" in out and "known discrepancy, grad known_square" in out
    # the new records as root causes, a line each with its records: the crash, and the wrong backward
    assert "new root causes: 2 (2 new records)" in out
    lines = out.split("new root causes:")[1].splitlines()[1:3]
    assert sorted(line.split()[0] for line in lines) == ["crash", "silent"]
    assert all(any(r["id"] in line for r in records) for line in lines)
    assert (report / "heatmap.png").exists() and "planted_square" in (report / "heatmap.html").read_text()


def test_the_budget_stops_new_batches_and_cuts_the_running_one(zoo):
    grad = get_check("grad")
    results = []
    campaign = run_campaign([(zoo.SIN, grad), (zoo.EXP, grad), (zoo.TANH, grad)],
                            size=BatchSize(examples=100_000), budget=1.0, jobs=1,
                            on_batch=lambda campaign, pair, batch: results.append(batch))
    assert campaign.skipped_for_budget == 2
    assert len(results) == 1 and len(campaign.results) == 1
    first = campaign.results[0]
    assert first.cut and not first.failed and first.target == "cheap_sin" and first.batches == 1
    assert 0 < first.tally.examples == first.tally.counts["pass"]
    assert first.seconds < 30  # stopped at its deadline, not after 100000 examples


def test_a_slow_pair_cannot_starve_the_others(zoo):
    """Its batch stops at the batch deadline; every other pair still gets its batches."""
    grad = get_check("grad")
    pairs = [(zoo.SLUGGISH, grad), (zoo.SIN, grad), (zoo.EXP, grad), (zoo.TANH, grad)]
    campaign = run_campaign(pairs, size=BatchSize(examples=50, variants=1), rounds=2, seed=1, jobs=1,
                            batch_seconds=1.0, database_url=None, device="cpu")  # CUDA's first cases cost seconds
    by_name = {r.target: r for r in campaign.results}
    assert set(by_name) == {"sluggish", "cheap_sin", "cheap_exp", "cheap_tanh"}
    slow = by_name["sluggish"]
    # each of its batches stopped about a second in (50 examples would take a minute)
    assert slow.cut and slow.seconds / slow.batches < 1.0 + 3.0 and campaign.seconds < 30
    assert sum(r.batches for r in campaign.results) == 2 * len(pairs)  # round 2: as many batches as pairs
    for name in ("cheap_sin", "cheap_exp", "cheap_tanh"):
        assert by_name[name].tally.examples > 0 and not by_name[name].cut


def test_with_a_gpu_the_forkserver_leaves_cuda_alone(monkeypatch):
    """Importing OpInfo's database initializes CUDA where a GPU is visible; a
    forkserver that imported it would fork workers that cannot use CUDA."""
    import torch

    from fuzzdiff.campaign import preload
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "torch.testing._internal.common_methods_invocations" in preload({"opinfo": True})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert "torch.testing._internal.common_methods_invocations" not in preload({"opinfo": True})


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="no CUDA device")
def test_a_cuda_campaign_runs_its_cases_on_the_gpu_in_forked_workers(zoo):
    grad = get_check("grad")
    campaign = run_campaign([(zoo.SIN, grad), (zoo.EXP, grad)], size=BatchSize(examples=4, variants=1), jobs=2,
                            seed=1, device="cuda", database_url=None)
    assert len(campaign.results) == 2
    for result in campaign.results:
        assert not result.failed and result.tally.counts["pass"] > 0, result


def test_every_pair_starts_once_before_any_starts_twice(zoo):
    grad, layout = get_check("grad"), get_check("layout")
    pairs = [(t, c) for c in (grad, layout) for t in (zoo.SIN, zoo.EXP, zoo.TANH)]
    started = []
    campaign = run_campaign(pairs, size=BatchSize(examples=2, variants=1), rounds=3, seed=5, jobs=2,
                            database_url=None, on_start=lambda k, t, c: t and started.append((t, c)))
    assert campaign.rounds == 3 and len(started) == 3 * len(pairs) == campaign.batches
    # the score after each of a pair's batches, the last round's included
    assert all(len(r.scores) == r.batches for r in campaign.results)
    assert len(set(started[:len(pairs)])) == len(pairs)
    assert {(t.name, c.name) for t, c in pairs} == set(started[:len(pairs)])


@pytest.mark.parametrize("argv, message", [
    (["--device", "cuda"], "no CUDA device"),
    (["--device", "tpu"], "expected cpu or cuda"),
    (["--dtypes", "int64"], "non-floating"),
    (["--jobs", "0"], "--jobs must be at least 1"),
    (["--dtypes", "float16", "--targets", "sin", "--checks", "dtype"], "takes float16"),
    (["--shard", "3/2", "--targets", "sin"], "expected I/N"),
    (["--rounds", "0"], "--rounds must be at least 1"),
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


def test_dtypes_and_device_become_case_options(zoo):
    import torch

    from fuzzdiff.campaign import case_options
    grad, dtype = get_check("grad"), get_check("dtype")
    assert case_options(zoo.SIN, grad) == {}
    assert case_options(zoo.SIN, grad, [torch.float32], "cuda") == {"dtypes": (torch.float32,),
                                                                     "devices": ("cuda",)}
    assert case_options(zoo.SIN, dtype, [torch.float64]) is None  # dtype takes low precision only


def test_the_first_round_is_a_fair_sample_wherever_a_budget_cuts_it(zoo):
    from fuzzdiff.campaign import round_one_order
    from fuzzdiff.targets.target import Target
    grad, vmap, compiled = get_check("grad"), get_check("vmap"), get_check("compile")
    catalog = [Target(f"unit_c{k}", zoo.SIN.fn, "x: n", "catalog_family") for k in range(10)]
    opinfo = [Target(f"unit_o{k}", zoo.SIN.fn, "x: n", "opinfo") for k in range(40)]
    pairs = [(t, c) for c in (compiled, grad, vmap) for t in catalog + opinfo]
    order = round_one_order(pairs)
    assert sorted((t.name, c.name) for t, c in order) == sorted((t.name, c.name) for t, c in pairs)
    eager = [p for p in order if not p[1].compiles]
    assert all(c.compiles for _, c in order[len(eager):])  # a first compile costs seconds: last
    for cut in (0.1, 0.25, 0.5, 0.8):
        head = eager[: round(cut * len(eager))]
        for family, n in (("catalog_family", 10), ("opinfo", 40)):
            for check in ("grad", "vmap"):
                swept = sum(t.family == family and c.name == check for t, c in head)
                assert abs(swept - cut * n) <= 1, (cut, family, check, swept)


def test_batches_narrow_for_fixed_shapes_and_costly_checks(zoo):
    from fuzzdiff.targets.target import Target
    size = BatchSize(examples=24)
    fixed = Target("unit_fixed", zoo.SIN.fn, "x: 2 3")
    assert size.for_pair(zoo.SIN, get_check("grad")) == size  # free sizes, a cheap check
    assert size.for_pair(zoo.SIN, get_check("vmap")) == size
    assert size.for_pair(fixed, get_check("grad")).examples == 3  # every size fixed (an OpInfo sample)
    assert size.for_pair(zoo.SIN, get_check("compile")).examples == 3  # a check that compiles
    assert BatchSize(examples=3).for_pair(fixed, get_check("grad")).examples == 2
    assert BatchSize(examples=1).for_pair(fixed, get_check("grad")).examples == 1  # never widened
    with pytest.raises(ValueError, match="examples must be at least 1"):
        BatchSize(examples=0)


def test_a_hang_in_a_pair_with_a_known_discrepancy_is_news_not_the_known_one(zoo):
    campaign = run_campaign([(zoo.KNOWN_BUT_HANGS, get_check("grad"))], size=BatchSize(examples=2),
                            jobs=1, timeout=1.0, database_url=None)
    (r,) = campaign.results
    assert r.failure is not None and r.failure.verdict.kind == "timeout"
    assert not r.known and r.failed and campaign.failures == [r]


def test_sigterm_ends_a_run_without_crash_records(zoo, tmp_path):
    """A cancelled CI job: the workers stop, and their cases in flight are not crashes."""
    import os
    import signal
    import subprocess
    import sys
    import time
    corpus = tmp_path / "corpus"
    code = ("import sys, fd_campaign_zoo\n"
            "from fuzzdiff import cli, commands\n"
            "from fuzzdiff.checks import get_check\n"
            "commands._select_pairs = lambda args, notes=None: [(fd_campaign_zoo.SLUGGISH, get_check('grad'))] * 1\n"
            f"sys.exit(cli.main(['run', '--jobs', '1', '--max-examples', '1000', '--db', '', '--corpus', {str(corpus)!r}]))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list((corpus / ".inflight").glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.2)  # until the worker is in the middle of an example
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    from fuzzdiff.journal import recover
    assert not list((corpus / ".inflight").glob("*.json"))  # the worker's entry was forgotten
    assert recover(corpus) == [] and not list(corpus.glob("*/*/*.json"))


def test_a_worker_whose_process_a_batch_disturbed_is_replaced(zoo):
    """torch's state is put back after each run, and the worker, which may hold
    more of it than can be put back, is replaced by a fresh one."""
    campaign = run_campaign([(zoo.LEAKY, get_check("grad")), (zoo.SIN, get_check("grad"))],
                            size=BatchSize(examples=4), jobs=1, seed=1)
    assert campaign.replaced and "leaky" in campaign.replaced[0]
    assert "inference mode left on (cannot be put back)" in campaign.replaced[0]
    after = next(r for r in campaign.results if r.target == "cheap_sin")
    assert after.tally.counts == {"pass": after.tally.examples}  # the next batch, in a fresh worker


def test_a_compile_pairs_first_batch_draws_the_cheap_backend_and_later_ones_all(zoo):
    """Round 1 must reach every compile pair: its first batch compiles without
    code generation; later batches draw every configured backend."""
    from fuzzdiff.campaign import CHEAP_BACKENDS, Job, first_backends, run_batch
    from fuzzdiff.config import COMPILE_BACKENDS, FuzzConfig
    from fuzzdiff.paths import compiled

    assert set(first_backends(COMPILE_BACKENDS) or ()) == set(CHEAP_BACKENDS)
    assert set(CHEAP_BACKENDS) == {"aot_eager", "aot_function", "aot_function_min_cut"}
    assert "inductor" not in CHEAP_BACKENDS  # code generation waits for the later batches
    assert first_backends(("inductor",)) is None  # the user's choice stands
    assert first_backends(("aot_eager",)) is None  # nothing to narrow
    assert first_backends(("aot_eager", "inductor")) == ("aot_eager",)

    def backends_drawn(backends):
        compiled._CACHE.clear()
        job = Job((0, 0), zoo.SIN.ref, "compile", None, {}, 11, BatchSize(examples=12, variants=1), None, backends)
        result = run_batch(job, {"config": FuzzConfig(), "timeout": None, "database": None, "isolate": False})
        assert result.error is None and result.failure is None and result.tally.examples > 0
        return {key[2] for key in compiled._CACHE}

    assert backends_drawn(first_backends(COMPILE_BACKENDS)) <= set(CHEAP_BACKENDS)
    assert "inductor" in backends_drawn(None)


def test_a_worker_runs_at_the_settings_the_command_resolved_and_its_environment_is_never_written(
        zoo, tmp_path, monkeypatch, capsys):
    """The command reads $FUZZDIFF_TIMEOUT, $FUZZDIFF_CORPUS and
    $HYPOTHESIS_STORAGE_DIRECTORY, set after the workers' forkserver started
    (so no fork hands them down), and its workers run at them: the hang's
    verdict carries the limit, the records land in that corpus, Hypothesis
    keeps its files in that storage. A variable that only the parent has stays
    out of the workers' environment, and the parent's is as it was."""
    grad = get_check("grad")
    run_campaign([(zoo.SIN, grad)], size=BatchSize(examples=1, variants=1), jobs=1, database_url=None)  # forkserver up
    corpus, storage = tmp_path / "corpus", tmp_path / "fd_zoo_storage"
    monkeypatch.setenv("FUZZDIFF_TIMEOUT", "1")
    monkeypatch.setenv("FUZZDIFF_CORPUS", str(corpus))
    monkeypatch.setenv("HYPOTHESIS_STORAGE_DIRECTORY", str(storage))
    monkeypatch.setenv("FUZZDIFF_TEST_MARK", "the parent's alone")
    pairs = [(zoo.ENV_PROBE, grad), (zoo.BAD, grad), (zoo.SLOW, grad)]
    monkeypatch.setattr(commands, "_select_pairs", lambda args, notes=None: pairs)
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


def test_the_campaign_sends_its_workers_one_config_and_no_environment(zoo, tmp_path):
    """What a pool is given: the config, with the campaign's corpus folded in; it pickles."""
    import pickle
    from dataclasses import replace

    from fuzzdiff.campaign import Done, PairResult
    from fuzzdiff.config import FuzzConfig
    from fuzzdiff.fuzzing import Tally

    sent, started = [], []

    class Recording:
        slots, retries = 1, 0

        def __init__(self, opts, jobs, pairs):
            sent.append(opts)
            self.done = []

        def start(self, k, job):
            started.append(job)
            self.done.append(Done(k, PairResult(job.target, job.check, Tally())))

        def wait(self, timeout):
            done, self.done = self.done, []
            return done

        def kill(self, k): ...

        def record(self, died):
            return []

        def usable(self, k):
            return True

        def node(self, k):
            return "here"

        def close(self): ...

    config = FuzzConfig(timeout=7.0, compile_backends=("aot_eager", "inductor"), hypothesis_storage=tmp_path)
    run_campaign([(zoo.SIN, get_check("grad")), (zoo.SIN, get_check("compile"))], config=config,
                 corpus=tmp_path / "corpus", pool=Recording, database_url=None)
    (opts,) = sent
    assert opts["config"] == replace(config, corpus=tmp_path / "corpus")
    assert pickle.loads(pickle.dumps(opts["config"])) == opts["config"]
    assert not [k for k in opts if "environ" in k or k == "corpus"]
    # the compile pair's first batch narrows the configured backends, not the environment's
    assert {job.check: job.backends for job in started} == {"grad": None, "compile": ("aot_eager",)}
