"""A torch op that raises at an empty batch it takes is torch's bug, not a
domain to declare (fuzzdiff.checking.empty_batch): a CPU FFT of an empty batch
raised an MKL error, and the report advised ``invalid=(RuntimeError,)``,
which would hide it for good."""

import pytest
import torch

import fuzzdiff
from fuzzdiff.checking.empty_batch import raising_call, refuses_empty_batch
from fuzzdiff.search.blame import PYTORCH, USER


def spectrum(x):
    return torch.fft.rfft(x).abs()


def column_maxima(x):
    return x.max(dim=0).values


def test_an_fft_of_an_empty_batch_is_torchs_failure_not_the_functions_domain():
    report = fuzzdiff.check(spectrum, "x: b n>=1", checks=["grad"], dtypes=[torch.float64],
                            max_examples=30, seed=0, progress=False)
    assert [f.check for f in report.failures] == ["grad"], report.summary()
    (failure,) = report.failures
    assert failure.blame.whose == PYTORCH and failure.blame.via == "torch op"
    assert "torch.fft.rfft raises at an empty batch" in failure.blame.evidence
    assert "invalid=" not in report.summary()


def test_an_op_that_reduces_the_empty_dim_still_marks_the_domain_with_a_spec_bound():
    report = fuzzdiff.check(column_maxima, "x: n m", checks=["grad"], dtypes=[torch.float64],
                            max_examples=30, seed=0, progress=False)
    assert [f.check for f in report.failures] == ["input-domain"], report.summary()
    assert "n>=1" in report.summary()


def zero_special_cased(x):
    """tntorch's truncated SVD: a special case (here, one element) made in the default dtype."""
    factor = torch.zeros(x.shape[-1]) if x.shape[-1] == 1 else x
    return x @ factor


def test_a_plain_call_that_raises_is_the_functions_whatever_check_found_it():
    """Found by the layout check, the raise is still in the plain call: no
    layout of torch's takes part, and the code multiplies two dtypes."""
    report = fuzzdiff.check(zero_special_cased, "x: n", checks=["layout"], dtypes=[torch.float64],
                            max_examples=30, seed=0, progress=False)
    assert [f.check for f in report.failures] == ["input-domain"], report.summary()
    (failure,) = report.failures
    assert failure.blame.whose == USER and "plain call" in failure.blame.evidence, failure.blame


@pytest.mark.parametrize(
    ("call", "torchs"),
    [
        (lambda: torch.fft.rfft(torch.zeros(0, 8)), True),
        (lambda: torch.zeros(0, 5).max(dim=0), False),  # no maximum of nothing
        (lambda: torch.fft.rfft(torch.zeros(3, 0)), False),  # the transformed dim: no batch
        (lambda: torch.nn.functional.batch_norm(torch.zeros(1, 3), None, None, training=True), False),  # Python's check
        # a height of 0 under a kernel of height 1: carried, but after the channels, which are not
        (lambda: torch.nn.functional.conv2d(torch.zeros(0, 1, 0, 6), torch.ones(1, 1, 1, 4)), False),
        (lambda: torch.fft.rfft(torch.zeros(2, 0, 8)), True),  # a batch dim after another
    ],
    ids=["fft batch", "reduced dim", "fft length", "torch's own Python check", "conv height", "fft inner batch"],
)
def test_only_an_op_in_cpp_refusing_a_batch_it_carries_is_torchs(call, torchs):
    error, raising = raising_call(call)
    assert error is not None
    assert (raising is not None and refuses_empty_batch(raising) is not None) is torchs


def _raises_on_negatives(x):
    if (x < 0).any():
        raise ValueError("negative input")
    return x.sqrt()


def test_a_failure_whose_domain_is_not_asked_before_the_budget_ends_is_unconfirmed(monkeypatch):
    """The input-domain question reruns the function's plain call and backward: on a
    slow function that ran 10 s past a 30 s budget. Bounded now; unanswered, unconfirmed."""
    from fuzzdiff.checking import session
    from fuzzdiff.guards.timeout import OutOfTime

    def too_late(target, failure):
        raise OutOfTime("the budget had ended before it started")

    monkeypatch.setattr(session, "domain_error", too_late)
    report = fuzzdiff.check(_raises_on_negatives, "x: n", checks=["grad"], dtypes=[torch.float64],
                            max_examples=20, seed=0, progress=False)
    assert not report.failures and report.ok
    (unconfirmed,) = report.unconfirmed
    assert "asked whether its input lies in the function's domain" in unconfirmed.elsewhere
    assert "NOT CONFIRMED grad" in report.summary()
