"""The implicit_rsample check: a sample torch differentiates holding its CDF
fixed, against the implicit-function identity dz/dθ = -(∂F/∂θ)(z; θ) / p(z; θ),
and its second derivative along the CDF's level set.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.autograd import Function
from torch.distributions import Beta, Gamma

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.case.values import Values
from fuzzdiff.checks import CHECKS
from fuzzdiff.checks.implicit_rsample import CHECK, implicit_rate, tanh_sinh
from fuzzdiff.search.runner import run_check
from fuzzdiff.targets import get_target
from fuzzdiff.targets.implicit import Implicit
from fuzzdiff.targets.target import Target

F64 = torch.float64


def gamma_series_dalpha(alpha: float, z: float, terms: int = 80) -> float:
    """∂P(α, z)/∂α of the regularized lower incomplete gamma, by hand: from
    P(α, z) = e^-z Σ_k z^(α+k) / Γ(α+k+1), term by term,
    ∂/∂α z^(α+k) / Γ(α+k+1) = z^(α+k) / Γ(α+k+1) (log z - ψ(α+k+1))."""
    total = 0.0
    for k in range(terms):
        a = torch.tensor(alpha + k + 1, dtype=F64)
        term = math.exp((alpha + k) * math.log(z) - float(torch.lgamma(a)))
        total += term * (math.log(z) - float(torch.special.digamma(a)))
    return math.exp(-z) * total


def test_the_oracle_on_gamma_is_the_hand_derived_implicit_gradient():
    """At α = 2, β = 1, z = 1.5: dz/dα = -(∂P/∂α)(2, 1.5) / p(1.5), the series
    above; and dz/dβ = -z/β exactly (the CDF P(α, βz) is held where βz is)."""
    target = get_target("Gamma.rsample")
    kwargs = {**target.kwargs, "validate_args": False}
    alpha, rate, z = torch.tensor([2.0], dtype=F64), torch.tensor([1.0], dtype=F64), torch.tensor([1.5], dtype=F64)
    density = Gamma(alpha, rate).log_prob(z).exp()  # z e^-z at α = 2
    assert float(density) == pytest.approx(1.5 * math.exp(-1.5), rel=1e-15)
    implicit = target.implicit

    def cdf(z, *args):  # the target's own CDF: torch's Gamma.cdf
        return implicit.cdf(z, *args, **kwargs)

    def along(direction):
        return float(implicit_rate(cdf, density, z, lambda ls: ls, [alpha, rate], direction, 1e-6))

    by_hand = -gamma_series_dalpha(2.0, 1.5) / float(density)
    assert along([torch.ones(1, dtype=F64), torch.zeros(1, dtype=F64)]) == pytest.approx(by_hand, rel=1e-8)
    assert along([torch.zeros(1, dtype=F64), torch.ones(1, dtype=F64)]) == pytest.approx(-1.5, rel=1e-8)
    # and torch's own implicit gradient at that z agrees, within its approximation
    assert float(torch._standard_gamma_grad(alpha, z)) == pytest.approx(by_hand, rel=5e-4)


def test_tanh_sinh_integrates_a_beta_density_singular_at_zero_to_rounding():
    nodes, weights = tanh_sinh()
    for a, z in ((0.1, 0.3), (0.1, 1e-8), (2.5, 0.7)):
        zt = torch.tensor(z, dtype=F64)
        density = Beta(torch.tensor(a, dtype=F64), torch.tensor(1.0, dtype=F64)).log_prob(zt * nodes).exp()
        assert float(zt * (weights * density).sum()) == pytest.approx(z**a, rel=1e-13)  # Beta(a, 1): F = z^a


# -- a planted implicit gradient --------------------------------------------------------------


class _Sampler(Function):
    """A standard Gamma sample whose backward is torch's implicit gradient."""

    @staticmethod
    def forward(ctx, alpha):
        z = torch._standard_gamma(alpha)
        ctx.save_for_backward(alpha, z)
        return z

    @staticmethod
    def backward(ctx, g):
        alpha, z = ctx.saved_tensors
        return g * torch._standard_gamma_grad(alpha, z)


class _WrongSampler(_Sampler):
    """The same, 5% off: far beyond torch's 5e-4."""

    @staticmethod
    def backward(ctx, g):
        alpha, z = ctx.saved_tensors
        return g * 1.05 * torch._standard_gamma_grad(alpha, z)


def _cdf(z, alpha):
    return torch.special.gammainc(alpha, z)


def _density(z, alpha):
    return Gamma(alpha, torch.ones_like(alpha), validate_args=False).log_prob(z).exp()


def _target(sampler) -> Target:
    return Target(
        f"implicit_{sampler.__name__}",
        sampler.apply,
        "alpha: n",
        "selftest",
        domain={"alpha": (0.0, None)},
        random=True,
        implicit=Implicit(_density, _cdf),
        tolerances=get_target("Gamma.rsample").tolerances,
    )


def _cases(n: int = 6) -> list[Case]:
    return [
        Case("planted", (Arg((3,), Values(seed=s, low=0.5, high=3.0)),),
             params={"cotangent": {"seed": s}, "direction": {"seed": s + 1}, "second": {"seed": s + 2}})
        for s in range(n)
    ]


def test_a_right_implicit_gradient_passes_and_a_planted_wrong_one_fails():
    right = [run_check(CHECK, _target(_Sampler), c) for c in _cases()]
    assert [v.kind for v in right] == ["pass"] * len(right), [v.message for v in right]
    wrong = [run_check(CHECK, _target(_WrongSampler), c) for c in _cases()]
    assert [v.kind for v in wrong] == ["fail"] * len(wrong), [v.message for v in wrong]
    assert all(v.message.startswith("dz/dθ of the sample") for v in wrong)


def test_torchs_gamma_and_chi2_samples_pass_and_a_missing_double_backward_is_not_a_failure():
    """torch has no derivative of _standard_gamma_grad: the second identity is
    unsupported there (it raises), so the verdict is the first identity's."""
    for name in ("Gamma.rsample", "Chi2.rsample"):
        target = get_target(name)
        for k, case in enumerate(_cases(4)):
            args = tuple(Arg((2,), Values(seed=k + j, low=0.5, high=3.0)) for j in range(len(target.args)))
            case = Case(target.name, args, kwargs={**target.kwargs, "validate_args": False}, params=case.params)
            verdict = run_check(CHECK, target, case)
            assert verdict.kind == "pass", (name, verdict.message)


def test_it_applies_to_implicit_targets_only_and_only_in_float64():
    assert CHECKS["implicit_rsample"] is CHECK
    assert CHECK.why_not(get_target("Normal.rsample")) is not None
    assert CHECK.why_not(get_target("Gamma.rsample")) is None
    assert CHECK.dtypes == (torch.float64,)
