"""The finite-difference ladder's rounding step: an analytic side that is a sum
of large terms that cancel is rounding's, not a wrong derivative.

nn.TransformerEncoder in eval mode at a stride-0 input (every row constant)
met it in a campaign: its layer norms of constant rows multiply by
1/sqrt(eps) each, the output is identically zero along the probe, and the
reverse-mode gradient was 0.063 of rounding noise against finite differences'
exact 0: "confirmed" by every other step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.case.layout import Layout
from fuzzdiff.case.values import Values
from fuzzdiff.search.runner import run_check
from fuzzdiff.targets.target import Target

OFFSETS = torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=torch.float64)


def _nested_norms(x):
    """Layer norms of constant rows, the second scaled up: identically zero along a constant x."""
    y = F.layer_norm(x, x.shape[-1:])
    return F.layer_norm(y * 1e10 + OFFSETS.to(x.dtype), x.shape[-1:])


NESTED_NORMS = Target("unit_nested_norms", _nested_norms, "x: 3 4")


def _constant_rows(grad: str) -> Case:
    """One value, laid out with stride 0 along both dims (``grad="view"``: the one-element storage is the leaf)."""
    return Case("unit_nested_norms", (Arg((3, 4), Values(seed=0, constant=(0, 1)), Layout(1, (0, 0)), grad=grad),))


def _rounding_doubt(target: Target, case: Case):
    from fuzzdiff.checks.grad import measure
    from fuzzdiff.confirm.identities import EPS, _rounding

    first = measure(target, case, EPS)
    return _rounding(lambda c, eps: measure(target, c, eps), case, first, EPS)()


def test_a_gradient_zero_by_cancellation_of_large_terms_is_inconclusive():
    from fuzzdiff.confirm.ladder import Doubt

    case = _constant_rows("view")
    assert run_check("grad", NESTED_NORMS, case).kind == "inconclusive"
    doubt = _rounding_doubt(NESTED_NORMS, case)  # the step itself, whichever step decides first here
    assert isinstance(doubt, Doubt) and "moves by float64 rounding" in doubt.why, doubt


def test_a_wrong_rule_at_the_same_point_still_fails():
    """The step asks the analytic side's own noise: a wrong derivative at the
    same stride-0 point hardly moves under rounding."""

    class Doubled(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            return 2 * g

    target = Target("unit_doubled", lambda x: torch.tanh(Doubled.apply(x)), "x: 3 4")
    verdict = run_check("grad", target, _constant_rows("view"))
    assert verdict.kind == "fail", verdict
    assert _rounding_doubt(target, _constant_rows("view")) is None


def test_two_ways_whose_float64_results_are_rounding_noise_are_inconclusive():
    """The twins' float64 step (alias, layout): nn.TransformerEncoderLayer at
    stride-0 inputs gave gradients of 1.2e4 in float32 and 1.2e-7 in float64,
    both rounding noise of cancelling terms, and two ways of them differed
    in both dtypes. The step asks float64's own rounding noise."""
    from fuzzdiff.confirm.compare import worst_discrepancy
    from fuzzdiff.confirm.ladder import Doubt
    from fuzzdiff.confirm.steps import rounding_explains
    from fuzzdiff.confirm.tolerance import tolerance

    x = torch.full((3, 4), 0.5, dtype=torch.float64, requires_grad=True)
    v = torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(3, 4)

    def noise():
        (g,) = torch.autograd.grad(_nested_norms(x.expand(3, 4) * 1.0), x, v)
        return [g]

    def doubled():
        return [2 * x.detach() * v]

    tol = tolerance(NESTED_NORMS, "alias", torch.float64)
    names = ["grad 0"]
    here = noise()
    doubt = rounding_explains(names, [(noise, here)], tol, torch.finfo(torch.float64).eps / 2)()
    assert isinstance(doubt, Doubt) and "rounding noise" in doubt.why, doubt
    steady = doubled()
    assert rounding_explains(names, [(doubled, steady)], tol, torch.finfo(torch.float64).eps / 2)() is None
    assert worst_discrepancy(names, here, steady, tol) is not None  # the two differ: the step alone decides
