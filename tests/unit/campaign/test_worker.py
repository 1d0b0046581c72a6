"""fuzzdiff.campaign.worker: one batch of one pair, as a worker process runs it.

``run_batch`` runs here in the test's own process; the targets
(tests/unit/fdcampaign.py) are imported from a temporary directory.
"""

import pytest
from tests.unit.fdcampaign import installed

from fuzzdiff.checks import get_check
from fuzzdiff.config import FuzzConfig
from fuzzdiff.campaign.worker import BatchSize, Job, WorkerSetup, run_batch

# a batch's examples each one drawn case at one variant, as `fuzzdiff run --variants 1` runs them
SETUP = WorkerSetup(FuzzConfig(variants=1, structures=1), isolate=False)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    with installed(tmp_path_factory.mktemp("zoo")) as module:
        yield module


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


def test_a_batch_stops_at_its_deadline_with_what_it_tallied(zoo):
    warm = run_batch(Job((0, 0), zoo.SIN.ref, "grad", None, {}, 7, BatchSize(examples=2)), SETUP)
    assert not warm.cut and warm.tally.examples == 2  # a process's first batch imports what the check needs
    job = Job((0, 1), zoo.SIN.ref, "grad", 1.0, {}, 7, BatchSize(examples=100_000))
    result = run_batch(job, SETUP)
    assert result.cut and result.failure is None and result.error is None
    assert result.target == "cheap_sin" and result.ref == zoo.SIN.ref
    assert 0 < result.tally.examples == result.tally.counts["pass"]
    assert result.seconds < 30


def test_a_batch_that_fails_sends_its_shrunk_failure_as_plain_data(zoo):
    import pickle

    job = Job((0, 0), zoo.BAD.ref, "grad", None, {}, 3, BatchSize(examples=6))
    result = run_batch(job, SETUP)
    assert result.failure is not None and result.failure.verdict.failed and result.failed
    assert result.failure.target == "planted_square" and result.failure.record_path is None  # no corpus: no record
    again = pickle.loads(pickle.dumps(result))  # to the parent, through a pipe or Ray
    assert again.failure.case.to_json() == result.failure.case.to_json()


def test_a_framework_error_is_the_batchs_result_not_the_workers_end():
    result = run_batch(Job((0, 0), "no_such_target_anywhere", "grad", None, {}, 0, BatchSize(examples=1)), SETUP)
    assert result.error is not None and "no_such_target_anywhere" in result.error
    assert result.failure is None and not result.cut and result.failed


def test_a_batch_draws_only_the_compile_backends_its_job_names(zoo):
    """A job that names backends (a compile pair's first batch) narrows the
    configured ones; one that names none draws them all."""
    from fuzzdiff.campaign.loop import CHEAP_BACKENDS, first_backends
    from fuzzdiff.config import COMPILE_BACKENDS
    from fuzzdiff.paths import compiled

    def backends_drawn(backends):
        compiled._CACHE.clear()
        job = Job((0, 0), zoo.SIN.ref, "compile", None, {}, 11, BatchSize(examples=12), None, backends)
        result = run_batch(job, SETUP)
        assert result.error is None and result.failure is None and result.tally.examples > 0
        return {key[2] for key in compiled._CACHE}

    assert backends_drawn(first_backends(COMPILE_BACKENDS)) <= set(CHEAP_BACKENDS)
    assert "inductor" in backends_drawn(None)


def test_a_batch_hands_compiled_autograds_capture_only_to_the_backends_its_job_names(zoo, monkeypatch):
    from fuzzdiff.paths import compiled_autograd as path

    drawn, real = set(), path.backward_compiler

    def recording(backend):
        drawn.add(backend)
        return real(backend)

    monkeypatch.setattr(path, "backward_compiler", recording)

    def backends_drawn(backends):
        drawn.clear()
        job = Job((0, 0), zoo.SIN.ref, "compiled_autograd", None, {}, 5, BatchSize(examples=8), autograd_backends=backends)
        result = run_batch(job, SETUP)
        assert result.error is None and result.failure is None and result.tally.examples > 0
        return set(drawn)

    assert backends_drawn(("ca_eager",)) == {"ca_eager"}
    assert len(backends_drawn(None)) > 1


def test_a_workers_setup_is_frozen_plain_data():
    """Sent alike to a forked process and to a Ray actor on another machine."""
    import dataclasses
    import pickle

    setup = WorkerSetup(FuzzConfig(corpus="records", database_url=""), sys_path=("/somewhere",), opinfo=True)
    assert pickle.loads(pickle.dumps(setup)) == setup
    with pytest.raises(dataclasses.FrozenInstanceError):
        setup.isolate = False  # type: ignore[misc]
