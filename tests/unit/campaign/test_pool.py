"""fuzzdiff.campaign.pool: this machine's worker processes, forked from a forkserver."""

import importlib.util

import pytest
from tests.unit.fdcampaign import campaign as settings, installed

from fuzzdiff.campaign.loop import run_campaign
from fuzzdiff.checks import get_check
from fuzzdiff.campaign.pool import preload
from fuzzdiff.campaign.worker import WorkerSetup, serve
from fuzzdiff.config import FuzzConfig


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    with installed(tmp_path_factory.mktemp("zoo")) as module:
        yield module


def test_the_forkserver_preloads_the_module_its_workers_run():
    """A worker process runs ``serve``: the forkserver imports its module (and
    through it torch, the checks and the paths) once, not each worker."""
    modules = preload(WorkerSetup(FuzzConfig()))
    assert serve.__module__ in modules
    assert all(importlib.util.find_spec(m) is not None for m in modules)


def test_with_a_gpu_the_forkserver_leaves_cuda_alone(monkeypatch):
    """Importing OpInfo's database initializes CUDA where a GPU is visible; a
    forkserver that imported it would fork workers that cannot use CUDA."""
    import torch

    from fuzzdiff.campaign.pool import preload
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "torch.testing._internal.common_methods_invocations" in preload(WorkerSetup(FuzzConfig(), opinfo=True))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert "torch.testing._internal.common_methods_invocations" not in preload(WorkerSetup(FuzzConfig(), opinfo=True))


def test_a_worker_whose_process_a_batch_disturbed_is_replaced(zoo):
    """torch's state is put back after each run, and the worker, which may hold
    more of it than can be put back, is replaced by a fresh one."""
    campaign = run_campaign([(zoo.LEAKY, get_check("grad")), (zoo.SIN, get_check("grad"))],
                            settings(batch_examples=4, jobs=1, seed=1))
    assert campaign.replaced and "leaky" in campaign.replaced[0]
    assert "inference mode left on (cannot be put back)" in campaign.replaced[0]
    after = next(r for r in campaign.results if r.target == "cheap_sin")
    assert after.tally.counts == {"pass": after.tally.examples}  # the next batch, in a fresh worker
