"""A derivative rule around a loop that stops on its values: a solver's tolerance.

Kepler's equation E - e sin E = M, solved by fixed-point iteration until the
residual is below a loose tolerance, inside an autograd.Function whose
backward (and jvp) is the implicit function theorem's: the derivative of the
exact root. Finite differences measure the root as computed, a few parts in
1e6 away: no first- or second-derivative check calls that a failure. A rule
1% off still fails, and so does a rule 1e-5 off whose forward stops on no test
of its values, or whose data-dependent loop runs outside the rule.
"""

from __future__ import annotations

import pytest
import torch
from torch.autograd import Function

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.case.values import Values
from fuzzdiff.confirm.stopping import stopping_rule
from fuzzdiff.search.runner import run_check
from fuzzdiff.targets.target import Target, Tol

SOLVER_TOL = 1e-6  # loose: the root as computed is ~1e-6 off the exact one
SPEC = "M: *b, e: *b"


def kepler_root(M, e):
    E = M.clone()
    while ((E - e * torch.sin(E) - M).abs() > SOLVER_TOL).any():
        E = M + e * torch.sin(E)
    return E


class Kepler(Function):
    """The root, differentiated as the exact root (implicit function theorem)."""

    factor = 1.0

    @staticmethod
    def forward(M, e):
        return kepler_root(M, e)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output, inputs[1])
        ctx.save_for_forward(output, inputs[1])

    @classmethod
    def backward(cls, ctx, g):
        E, e = ctx.saved_tensors
        dM = g / (1 - e * torch.cos(E)) * cls.factor
        return dM, dM * torch.sin(E)

    @classmethod
    def jvp(cls, ctx, dM, de):
        E, e = ctx.saved_tensors
        return (dM + de * torch.sin(E)) / (1 - e * torch.cos(E)) * cls.factor


class KeplerNoJvp(Kepler):
    """As xitorch's rootfinder: reverse mode only (forward2 then judges the
    reverse identities, not nested jvp, which reads a custom Function's second
    derivatives as zero: pytorch/pytorch#197867)."""

    jvp = Function.jvp


class KeplerOff(KeplerNoJvp):
    factor = 1.01  # a wrong rule: 1% off


class SinOff(Function):
    """No loop at all: a rule 1e-5 off."""

    @staticmethod
    def forward(x):
        return torch.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.cos(x) * (1 + 1e-5)


def sin_off_after_a_loop(M, e):
    """A data-dependent loop, outside the rule, and a rule 1e-5 off."""
    return SinOff.apply(kepler_root(M, e).detach() * 0 + M) * e


def _probe(seed: int) -> dict:
    return {"seed": seed, "layout": "contiguous", "zeros": 0.0}


def _case(seed: int) -> Case:
    """One mean anomaly and one eccentricity, as Kepler's equation has them
    (on vectors, a 1% error is a small part of a dot product that cancels)."""
    args = (Arg((), Values(seed=seed, low=-2.0, high=2.0)), Arg((), Values(seed=seed + 7, low=0.1, high=0.6)))
    probes = {name: _probe(seed + k) for k, name in enumerate(("cotangent", "direction", "second"), 2)}
    return Case("unit", args, "float64", params=probes)


def _kinds(check: str, target: Target) -> list[str]:
    return [run_check(check, target, _case(seed)).kind for seed in range(6)]


@pytest.mark.parametrize(
    "check,function", [("grad", Kepler), ("forward", Kepler), ("gradgrad", KeplerNoJvp), ("forward2", KeplerNoJvp)]
)
def test_the_exact_roots_derivative_is_no_failure_of_a_solve_that_stops_on_its_residual(check, function):
    """The mismatch is real (the computed root's slope is not the exact
    root's) and small: inconclusive, with what fuzzdiff saw."""
    target = Target("unit_kepler", function.apply, SPEC)
    verdicts = [run_check(check, target, _case(seed)) for seed in range(6)]
    assert "fail" not in [v.kind for v in verdicts], [v.message for v in verdicts if v.kind == "fail"]
    stopped = [v for v in verdicts if v.kind == "inconclusive" and v.errors.get("decided_by") == "stopping"]
    assert len(stopped) >= 3, [v.message for v in verdicts]
    assert all(f"({function.__name__})" in v.message and "stopping tolerance" in v.message for v in stopped)


def test_a_wrong_rule_around_the_same_solve_still_fails():
    """1% is no solver's tolerance."""
    assert set(_kinds("grad", Target("unit_kepler_off", KeplerOff.apply, SPEC))) == {"fail"}


@pytest.mark.parametrize("check", ["gradgrad", "forward2"])
def test_a_wrong_rule_around_the_same_solve_still_fails_in_second_derivatives(check):
    """Reverse over reverse runs the rule twice, and its 1% once or twice in
    each term: against finite differences of the (1% off) first derivative,
    a mismatch of a part in 1e3 or more, except where the terms happen to
    weigh alike."""
    kinds = _kinds(check, Target("unit_kepler_off", KeplerOff.apply, SPEC))
    assert kinds.count("fail") >= 4 and "pass" not in kinds, kinds


@pytest.mark.parametrize("fn", [SinOff.apply, sin_off_after_a_loop], ids=["no loop", "a loop outside the rule"])
def test_a_small_error_of_a_rule_without_a_stopping_loop_still_fails(fn):
    """1e-5 is within a solver's tolerance, but no loop of the rule's own stops
    on its values: nothing excuses it (where the rule's part of the
    derivative weighs little, it is within float64's tolerance: a pass)."""
    if fn is SinOff.apply:
        target = Target("unit_sin_off", fn, "x: *b")
        probes = [{"cotangent": _probe(s + 2), "direction": _probe(s + 3)} for s in range(6)]
        cases = [Case("unit", (Arg((), Values(seed=s)),), "float64", params=p) for s, p in enumerate(probes)]
    else:
        target, cases = Target("unit_sin_off_after_a_loop", fn, SPEC), [_case(s) for s in range(6)]
    verdicts = [run_check("grad", target, c) for c in cases]
    assert [v.kind for v in verdicts].count("fail") >= 4, [v.kind for v in verdicts]
    assert "inconclusive" not in [v.kind for v in verdicts], [v.message for v in verdicts]


def test_a_declared_tolerance_is_judged_against_with_nothing_excused():
    """The accuracy the caller declares for the solver is what the derivatives
    are judged against: within it they pass, beyond it they fail."""
    loose = Target("unit_kepler", Kepler.apply, SPEC, tolerances={"grad": Tol(1e-10, 1e-4, "the solver's")})
    tight = Target("unit_kepler", Kepler.apply, SPEC, tolerances={"grad": Tol(1e-10, 1e-7, "float64's")})
    assert set(_kinds("grad", loose)) == {"pass"}
    assert "fail" in _kinds("grad", tight)
    assert "fail" not in _kinds("grad", Target("unit_kepler", Kepler.apply, SPEC))  # none declared: excused


def test_the_watch_sees_the_rule_and_its_loops_test():
    seen = stopping_rule(Target("unit_kepler", Kepler.apply, SPEC), _case(0))
    assert seen is not None and seen.rules == ("Kepler",) and seen.again >= 2
    assert seen.site.startswith("test_stopping.py:")
    assert stopping_rule(Target("unit_loop_outside", sin_off_after_a_loop, SPEC), _case(0)) is None
