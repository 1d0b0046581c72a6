"""fuzzdiff.campaign.loop: the loop of a campaign in worker processes, its rounds, budget and batch sizes.

The targets (tests/unit/fdcampaign.py) live in a module written to a
temporary directory, importable by the workers. ``fuzzdiff run`` itself, its
table and flags, is test_run.py's; the worker's batch is test_worker.py's,
the pool's processes test_pool.py's.
"""

import pytest
from tests.unit.fdcampaign import campaign as settings, installed

from fuzzdiff.campaign.loop import run_campaign
from fuzzdiff.checks import get_check


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    with installed(tmp_path_factory.mktemp("zoo")) as module:
        yield module


def test_the_budget_stops_new_batches_and_cuts_the_running_one(zoo):
    """Round 1 is one layout tour a pair; the next batch, of 100,000 examples,
    runs into the budget's end and is cut there, and none starts after it."""
    grad = get_check("grad")
    results = []
    campaign = run_campaign([(zoo.SIN, grad), (zoo.EXP, grad), (zoo.TANH, grad)],
                            settings(batch_examples=100_000, budget=4.0, jobs=1),
                            on_batch=lambda campaign, pair, batch: results.append(batch))
    *tours, last = results
    assert last.cut and not any(r.cut for r in tours) and len(tours) <= 3
    assert 0 < last.tally.examples == last.tally.counts["pass"]
    assert campaign.seconds < 30  # stopped at its deadline, not after 100000 examples


def test_a_slow_pair_cannot_starve_the_others(zoo):
    """Its batch stops at the batch deadline; every other pair still gets its batches."""
    grad = get_check("grad")
    pairs = [(zoo.SLUGGISH, grad), (zoo.SIN, grad), (zoo.EXP, grad), (zoo.TANH, grad)]
    campaign = run_campaign(pairs, settings(batch_examples=50, variants=1, rounds=2, seed=1, jobs=1, batch_seconds=1.0,
                                            device="cpu"))  # CUDA's first cases cost seconds
    by_name = {r.target: r for r in campaign.results}
    assert set(by_name) == {"sluggish", "cheap_sin", "cheap_exp", "cheap_tanh"}
    slow = by_name["sluggish"]
    # each of its batches stopped about a second in (50 examples would take a minute)
    assert slow.cut and slow.seconds / slow.batches < 1.0 + 3.0 and campaign.seconds < 30
    assert sum(r.batches for r in campaign.results) == 2 * len(pairs)  # round 2: as many batches as pairs
    for name in ("cheap_sin", "cheap_exp", "cheap_tanh"):
        assert by_name[name].tally.examples > 0 and not by_name[name].cut


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="no CUDA device")
def test_a_cuda_campaign_runs_its_cases_on_the_gpu_in_forked_workers(zoo):
    grad = get_check("grad")
    campaign = run_campaign([(zoo.SIN, grad), (zoo.EXP, grad)],
                            settings(batch_examples=4, variants=1, jobs=2, seed=1, device="cuda"))
    assert len(campaign.results) == 2
    for result in campaign.results:
        assert not result.failed and result.tally.counts["pass"] > 0, result


def test_every_pair_starts_once_before_any_starts_twice(zoo):
    grad, layout = get_check("grad"), get_check("layout")
    pairs = [(t, c) for c in (grad, layout) for t in (zoo.SIN, zoo.EXP, zoo.TANH)]
    started = []
    campaign = run_campaign(pairs, settings(batch_examples=2, variants=1, rounds=3, seed=5, jobs=2),
                            on_start=lambda k, t, c: t and started.append((t, c)))
    assert campaign.rounds == 3 and len(started) == 3 * len(pairs) == campaign.batches
    # the score after each of a pair's batches, the last round's included
    assert all(len(r.scores) == r.batches for r in campaign.results)
    assert len(set(started[:len(pairs)])) == len(pairs)
    assert {(t.name, c.name) for t, c in pairs} == set(started[:len(pairs)])


def test_dtypes_and_device_become_case_options(zoo):
    import torch

    from fuzzdiff.campaign.loop import case_options
    grad, dtype = get_check("grad"), get_check("dtype")
    assert case_options(zoo.SIN, grad) == {}
    assert case_options(zoo.SIN, grad, [torch.float32], "cuda") == {"dtypes": (torch.float32,),
                                                                     "devices": ("cuda",)}
    assert case_options(zoo.SIN, dtype, [torch.float64]) is None  # dtype takes low precision only


def test_the_first_round_is_a_fair_sample_wherever_a_budget_cuts_it(zoo):
    from fuzzdiff.campaign.loop import round_one_order
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


def test_a_hang_in_a_pair_with_a_known_discrepancy_is_news_not_the_known_one(zoo):
    campaign = run_campaign([(zoo.KNOWN_BUT_HANGS, get_check("grad"))],
                            settings(batch_examples=2, jobs=1, timeout=1.0))
    (r,) = campaign.results
    assert r.failure is not None and r.failure.verdict.kind == "timeout"
    assert not r.known and r.failed and campaign.failures == [r]


def test_a_compile_pairs_first_batch_draws_the_cheap_backends_only():
    """Round 1 must reach every compile pair: its first batch compiles without
    code generation; later batches draw every configured backend (the worker
    draws what its job names: test_worker.py)."""
    from fuzzdiff.campaign.loop import CHEAP_BACKENDS, first_backends
    from fuzzdiff.config import COMPILE_BACKENDS

    assert set(first_backends(COMPILE_BACKENDS) or ()) == set(CHEAP_BACKENDS)
    assert set(CHEAP_BACKENDS) == {"aot_eager", "aot_function", "aot_function_min_cut"}
    assert "inductor" not in CHEAP_BACKENDS  # code generation waits for the later batches
    assert first_backends(("inductor",)) is None  # the user's choice stands
    assert first_backends(("aot_eager",)) is None  # nothing to narrow
    assert first_backends(("aot_eager", "inductor")) == ("aot_eager",)


def test_a_compiled_autograd_pairs_first_batch_runs_the_capture_alone():
    """compiled autograd's first batch hands the captured backward to nothing
    (no dynamo trace of it, five sixths of an "eager" batch's time); a user's
    own choice of backends stands."""
    from fuzzdiff.campaign.loop import CHEAP_AUTOGRAD_BACKENDS, first_backends
    from fuzzdiff.config import COMPILED_AUTOGRAD_BACKENDS

    assert first_backends(COMPILED_AUTOGRAD_BACKENDS, CHEAP_AUTOGRAD_BACKENDS) == ("ca_eager",)
    assert first_backends(("eager", "inductor"), CHEAP_AUTOGRAD_BACKENDS) is None



def test_a_pairs_first_batch_is_one_layout_tour_and_its_later_batches_the_mix(zoo):
    """Round 1 gives each pair one example: a case of each layout class that
    applies (fuzzdiff.search.layout_tour); later batches draw the mix, at the
    batch size."""
    from fuzzdiff.search.layout_tour import TOUR, tour_classes

    grad = get_check("grad")
    batches = []
    run_campaign([(zoo.SIN, grad)], settings(batch_examples=3, variants=1, rounds=2, seed=1, jobs=1),
                 on_batch=lambda campaign, pair, batch: batches.append(batch))
    first, second = batches
    classes = tour_classes(grad, zoo.SIN, {})
    assert set(classes) < set(TOUR) and len(classes) >= 5  # a vector: every class but permuted and channels-last
    assert sum(first.tally.counts.values()) == len(classes)  # one tour: a case a class, at one variant
    assert sum(second.tally.counts.values()) == 3  # three examples of one case each


def test_a_compiling_pairs_first_batch_is_one_case_of_one_class(zoo):
    """A compile costs seconds where an eager case costs milliseconds: the
    first batch of a compiling pair tours one class (layout_tour.first_tour)."""
    compiled = get_check("compile")
    batches = []
    run_campaign([(zoo.SIN, compiled)], settings(batch_examples=3, variants=1, rounds=1, seed=1, jobs=1),
                 on_batch=lambda campaign, pair, batch: batches.append(batch))
    (first,) = batches
    assert sum(first.tally.counts.values()) == 1
    from fuzzdiff.search.layout_tour import met

    assert 1 <= len(met(first.first_batch_features)) <= 2  # its class (and contiguous, where it leaves an argument so)


def _recording_pool(sent: list, started: list, seconds: float = 0.0):
    """A pool that records the setup and jobs it is given, and ends each batch
    at once as having taken ``seconds``."""
    from fuzzdiff.campaign.pool import Done
    from fuzzdiff.campaign.results import PairResult
    from fuzzdiff.search.fuzzing import Tally

    class Recording:
        slots, retries = 1, 0

        def __init__(self, setup, jobs, pairs):
            sent.append(setup)
            self.done = []

        def start(self, k, job):
            started.append(job)
            self.done.append(Done(k, PairResult(job.target, job.check, Tally(), seconds=seconds)))

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

    return Recording


def test_a_round_slower_than_its_plan_narrows_the_tours_of_the_pairs_left(zoo, tmp_path):
    """Batches that take longer than the share of the budget allows, at the
    measured pace: once enough have ended, the next first tours meet fewer
    classes, so that every pair still gets its batch."""
    from fuzzdiff.campaign.pace import MIN_TOUR, SAMPLE
    from fuzzdiff.config import FuzzConfig

    checks = ("grad", "forward", "gradgrad", "layout", "alias", "mutation", "forward2", "checkpoint", "vmap")
    pairs = [(t, get_check(c)) for t in (zoo.SIN, zoo.EXPANDED_SUM) for c in checks]
    started: list = []
    config = FuzzConfig(hypothesis_storage=tmp_path, budget=600.0, rounds=1, seed=1)
    campaign = run_campaign(pairs, config, pool=_recording_pool([], started, seconds=60.0))
    firsts = [job.tour_cases for job in started if job.key[1] == 0]
    assert len(firsts) == len(pairs)  # every pair got its batch
    assert firsts[:SAMPLE] == [None] * SAMPLE  # whole tours, until the pace is measured
    # 60 s a batch on one worker: the tours narrow while the pairs not started need more than
    # the share's 300 s, widening as fewer are left, and the last four, which fit, are whole
    narrowed = firsts[SAMPLE:-4]
    assert all(n is not None and n >= MIN_TOUR for n in narrowed) and narrowed == sorted(narrowed)
    assert firsts[-4:] == [None] * 4
    assert campaign.narrowed_tours == len(narrowed) > 0
    started.clear()
    fast = run_campaign(pairs, config, pool=_recording_pool([], started, seconds=0.01))
    assert fast.narrowed_tours == 0 and all(job.tour_cases is None for job in started)


def test_the_campaign_sends_its_workers_one_config_and_no_environment(zoo, tmp_path):
    """What a pool is given: a frozen setup holding the config, the campaign's corpus in it; it pickles."""
    import pickle
    from dataclasses import fields

    from fuzzdiff.config import FuzzConfig
    from fuzzdiff.campaign.worker import WorkerSetup

    sent, started = [], []
    Recording = _recording_pool(sent, started)
    config = FuzzConfig(timeout=7.0, compile_backends=("aot_eager", "inductor"), hypothesis_storage=tmp_path,
                        corpus=tmp_path / "corpus")
    run_campaign([(zoo.SIN, get_check("grad")), (zoo.SIN, get_check("compile"))], config, pool=Recording)
    (setup,) = sent
    assert isinstance(setup, WorkerSetup) and setup.config == config
    assert pickle.loads(pickle.dumps(setup)) == setup
    assert not [f.name for f in fields(setup) if "environ" in f.name or f.name == "corpus"]
    # the compile pair's first batch narrows the configured backends, not the environment's
    assert {job.check: job.backends for job in started} == {"grad": None, "compile": ("aot_eager",)}
