"""A check that raises where the function's own domain ends is no finding
(fuzzdiff.search.runner): torchquad integrates over [lo, hi] and refuses
lo > hi, so at lo == hi the plain call runs and finite differences step
across the edge; they raised the function's own ValueError, reported as
three failures of "your code"."""

import torch

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.case.values import Values
from fuzzdiff.search.runner import DOMAIN_EDGE, run_check
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
