"""A check that raises where the function's own domain ends is no finding
(fuzzdiff.search.runner): torchquad integrates over [lo, hi] and refuses
lo > hi, so at lo == hi the plain call runs and finite differences step
across the edge; they raised the function's own ValueError, reported as
three failures of "your code"."""

import torch

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.case.values import Values
from fuzzdiff.search.runner import DOMAIN_EDGE, NOT_DIFFERENTIABLE_HERE, run_check
from fuzzdiff.targets.target import Target


def span_squared(lo, hi):
    if (hi - lo).min() < 0:
        raise ValueError("integration_domain has invalid boundary values")
    return (hi - lo) ** 2


def doubled(lo, hi):
    if (hi - lo).min() < 0:
        raise ValueError("integration_domain has invalid boundary values")
    return Refuses.apply(hi - lo)


class Refuses(torch.autograd.Function):
    """A backward that raises the forward's own error everywhere: a finding,
    whatever the forward's domain."""

    @staticmethod
    def forward(x):
        return 2 * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        raise ValueError("integration_domain has invalid boundary values")


def _at_the_edge(name) -> Case:
    same = Values(seed=3)  # lo == hi: the plain call runs, lo > hi a step away does not
    return Case(name, (Arg((), same), Arg((), same)), "float64")


def test_a_raise_a_step_past_the_functions_own_domain_is_inconclusive():
    target = Target("unit_span", span_squared, "lo: , hi: ")
    verdict = run_check("grad", target, _at_the_edge(target.name))
    assert verdict.kind == "inconclusive" and DOMAIN_EDGE in verdict.message, verdict


def test_a_raise_the_plain_call_never_makes_stays_a_failure():
    target = Target("unit_refuses", doubled, "lo: , hi: ")
    verdict = run_check("grad", target, _at_the_edge(target.name))
    assert verdict.failed and "ValueError" in verdict.message, verdict


def log_volume_of_rank_one(v):
    """-inf everywhere: the columns are equal, and slogdet's backward solves with the matrix."""
    return torch.linalg.slogdet(v[:, None] * torch.ones(3, dtype=v.dtype))[1]


def test_a_backward_formula_that_raises_where_the_output_is_not_finite_is_inconclusive():
    """normflows' Invertible1x1Conv at a rank-one weight: log|det| is -inf, and
    the _LinAlgError of slogdet's backward was blamed on PyTorch."""
    target = Target("unit_rank_one", log_volume_of_rank_one, "v: 3")
    case = Case(target.name, (Arg((3,), Values(seed=3)),), "float64")
    for check in ("gradgrad", "forward2"):
        verdict = run_check(check, target, case)
        assert verdict.kind == "inconclusive" and NOT_DIFFERENTIABLE_HERE in verdict.message, verdict
        assert "_LinAlgError" in verdict.message, verdict


def test_a_backward_that_raises_where_the_output_is_finite_stays_a_failure():
    """The same error of slogdet's backward, at a finite output, is a finding."""

    def refused(v):
        return torch.linalg.slogdet(torch.eye(3, dtype=v.dtype) + v.sum())[1] + Refuses.apply(v).sum()

    target = Target("unit_refused", refused, "v: 3")
    verdict = run_check("grad", target, Case(target.name, (Arg((3,), Values(seed=3)),), "float64"))
    assert verdict.failed and "ValueError" in verdict.message, verdict
