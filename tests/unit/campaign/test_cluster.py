"""``fuzzdiff run --ray``: the same campaign, its batches on Ray workers (fuzzdiff.campaign.cluster).

One local Ray instance of two CPUs serves the module in each process that
runs its tests (starting one costs seconds). Under ``--dist loadgroup`` the
tests share one xdist worker; under ``-n auto``'s load distribution two
workers may each start an instance, which costs seconds, not correctness
(``--dist`` is not in addopts: a run without xdist would refuse it). The planted targets live in
a module written to a temporary directory: the workers import it through the
sys.path the campaign ships them.
"""

import json
import textwrap
import time

import pytest

ray = pytest.importorskip("ray")

from fuzzdiff import cli  # noqa: E402 - after the skip: without ray there is nothing to test
from fuzzdiff.campaign.loop import run_campaign  # noqa: E402
from fuzzdiff.checks import get_check  # noqa: E402
from fuzzdiff.campaign.cluster import connected, ray_pool  # noqa: E402
from fuzzdiff.targets import get_target  # noqa: E402
from tests.unit.fdcampaign import campaign  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")

ZOO = textwrap.dedent('''
    import os
    import torch
    from torch.autograd import Function
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

    def exiting(x):
        if x.numel() >= 2:
            os._exit(1)  # the worker process dies mid-batch, as a segfault would kill it
        return x.sin()

    def _t(name, fn, attr):
        return Target(name, fn, "x: n", origin=f"fd_ray_zoo:{attr}", max_side=3)

    SIN = _t("ray_sin", torch.sin, "SIN")
    BAD = _t("ray_planted_square", BadSquare.apply, "BAD")
    EXIT = _t("ray_exiting", exiting, "EXIT")
''')


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rayzoo")
    (folder / "fd_ray_zoo.py").write_text(ZOO)
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(folder))  # shipped to the workers with the campaign
        import fd_ray_zoo
        yield fd_ray_zoo


@pytest.fixture(scope="module")
def cluster(zoo):
    with connected(None, cpus=2):
        yield


def _counts(campaign):
    return {(r.target, r.check): (r.batches, dict(r.tally.counts)) for r in campaign.results}


def test_a_seeded_campaign_gives_the_same_pairs_and_verdicts_locally_and_on_ray(cluster):
    pairs = [(get_target(t), get_check(c)) for c in ("grad", "layout") for t in ("sin", "exp", "mul")]
    config = campaign(batch_examples=4, variants=1, rounds=1, seed=11, jobs=2, batch_seconds=None)
    local = run_campaign(pairs, config)
    on_ray = run_campaign(pairs, config, pool=ray_pool())
    assert len(local.results) == len(pairs) and not local.failures
    assert _counts(on_ray) == _counts(local)
    assert on_ray.examples == local.examples > 0 and on_ray.batches == local.batches == len(pairs)
    (node,) = on_ray.nodes.values()  # one machine: its workers did every batch
    assert node.slots == 2 and node.batches == len(pairs) and node.examples == on_ray.examples


def test_a_failure_is_recorded_once_by_the_driver(cluster, zoo, tmp_path):
    corpus = tmp_path / "corpus"
    pools = []

    def pool(*args):
        pools.append(ray_pool()(*args))
        return pools[-1]

    for created in (True, False):  # the second campaign finds the same failure: already recorded
        result = run_campaign([(zoo.BAD, get_check("grad")), (zoo.SIN, get_check("grad"))],
                              campaign(batch_examples=6, variants=1, seed=3, jobs=2, corpus=corpus), pool=pool)
        sent = pools[-1].setup  # what the workers were given: the campaign's config, without its corpus
        assert sent.config.corpus is None and sent.config.seed == 3
        (failed,) = result.failures
        assert failed.target == "ray_planted_square" and failed.failure.record_created is created
        (record,) = corpus.glob("grad/*/*.json")
        assert failed.failure.record_path == str(record)
        assert json.loads(record.read_text())["verdict"]["kind"] == "fail"


@pytest.mark.parametrize("per_call", [1, 2])
def test_a_worker_killed_mid_batch_costs_its_batch_and_leaves_a_crash_record(cluster, zoo, tmp_path, per_call):
    """With two batches per actor call, the other batch of the dead worker's call
    runs again too, and is no crash: the journal says whose case was in flight."""
    corpus = tmp_path / "corpus"
    grad = get_check("grad")
    config = campaign(batch_examples=8, seed=5, jobs=1 if per_call > 1 else 2, corpus=corpus)
    result = run_campaign([(zoo.EXIT, grad), (zoo.SIN, grad)], config, pool=ray_pool(per_call=per_call))
    by_name = {r.target: r for r in result.results}
    assert set(by_name) == {"ray_exiting", "ray_sin"}  # the run went on, and completed
    crash = by_name["ray_exiting"]
    assert crash.crashed and "died" in crash.error and len(result.retried) == 1  # ran once more, died again
    assert not by_name["ray_sin"].failed and by_name["ray_sin"].tally.examples > 0
    (path,) = crash.crash_records
    record = json.loads(open(path).read())
    assert record["verdict"]["kind"] == "crash" and record["target"] == "fd_ray_zoo:EXIT"
    assert "died" in record["verdict"]["message"]
    assert len(list(corpus.glob("grad/*/*.json"))) == 1
    assert record["inputs"][0]["shape"][0] >= 2  # the very case that killed it: two or more elements


def test_an_unreachable_cluster_exits_2_at_once(capsys):
    t0 = time.monotonic()
    assert cli.main(["run", "--ray", "127.0.0.1:1", "--targets", "sin", "--checks", "grad"]) == 2
    assert time.monotonic() - t0 < 30
    assert "no Ray cluster answers" in capsys.readouterr().err


def test_a_cluster_that_disappears_ends_the_run_with_the_results_so_far(cluster):
    """Last in the module: it ends the module's Ray instance."""
    grad = get_check("grad")
    pairs = [(get_target(t), grad) for t in ("sin", "exp", "mul", "tanh", "cos")]
    result = run_campaign(pairs, campaign(batch_examples=4, variants=1, rounds=1, seed=1, jobs=2), pool=ray_pool(),
                          on_batch=lambda *_: ray.shutdown())  # gone after a batch
    assert result.lost and "lost the Ray cluster" in result.lost
    done = [r for r in result.results if r.tally.examples]
    assert done and len(result.results) < len(pairs)  # what finished is kept; nothing more started
    assert all(r.cut for r in result.results if r not in done)
