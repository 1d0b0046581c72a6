"""forward2: which identities it judges where, and which failure it reports."""

from __future__ import annotations

import math

import torch
from hypothesis import HealthCheck, find, settings

import fuzzdiff
from fuzzdiff.checks import get_check
from fuzzdiff.targets.known import matching
from fuzzdiff.search.runner import case_strategy, run_check
from fuzzdiff.targets import get_target
from fuzzdiff.targets.discrepancies import NESTED_JVP_FUNCTION, NESTED_JVP_LINALG

CHECK = get_check("forward2")
FIND = settings(max_examples=200, database=None, derandomize=True, suppress_health_check=list(HealthCheck))


def a_case(target: str, condition=lambda c: True):
    return find(case_strategy(CHECK, get_target(target)), condition, settings=FIND)


def test_a_module_target_has_its_dual_number_identities_judged():
    """A module is built inside every call: torch.func refuses that (its
    `.data` writes), so forward over forward is unsupported, not a failure,
    and the fwAD identities still pass."""
    case = a_case("nn_linear")
    verdict = run_check("forward2", get_target("nn_linear"), case)
    assert verdict.kind == "pass", verdict.message


def test_logdets_wrong_nested_jvp_is_its_known_torch_bug():
    """torch.logdet's jvp formula is not differentiable: forward over forward
    reads zero; the reverse identities pass, and the Known names it."""
    case = a_case("logdet", lambda c: c.args[0].shape == (2, 2) and c.dtype == "float64")
    target = get_target("logdet")
    verdict = run_check("forward2", target, case)
    assert verdict.kind == "fail" and verdict.errors["analytic"] == 0.0, verdict.message
    assert matching(target.known, "forward2", case, verdict) is NESTED_JVP_LINALG


def test_nested_jvp_through_a_custom_function_is_judged_and_known_after_its_jvp_passes():
    """Nested torch.func.jvp reads a custom Function's second derivatives as
    zero (pytorch/pytorch#197867): judged, named for the Function, and known;
    a wrong jvp derivative is reported by reverse over forward first, not known."""
    from tests.selftest.zoo import TARGETS

    twin, bug = TARGETS.xexp_jvp_detached_twin, TARGETS.xexp_jvp_detached
    case = find(case_strategy(CHECK, twin), lambda c: c.dtype == "float64" and math.prod(c.args[0].shape) > 1,
                settings=FIND)
    verdict = run_check("forward2", twin, case)
    assert verdict.kind == "fail" and verdict.errors["analytic"] == 0.0, verdict.message
    assert "forward-over-forward through a custom autograd.Function" in verdict.message
    assert matching(twin.known, "forward2", case, verdict) is NESTED_JVP_FUNCTION
    found = run_check("forward2", bug, case)
    assert found.kind == "fail" and "reverse-over-forward" in found.message, found.message
    assert matching(bug.known, "forward2", case, found) is None


def test_a_nan_second_derivative_where_the_function_itself_is_nan_is_inconclusive():
    """corrcoef of constant rows is 0/0 = nan at the point and finite an eps
    away: the finite differences see 0, every identity nan; no derivative to check."""
    import torch

    from fuzzdiff.case.case import Arg, Case
    from fuzzdiff.targets.target import Target
    from fuzzdiff.case.values import Values

    case = Case("corrcoef_rows", (Arg((2, 3), Values(seed=1, low=0.75, high=0.75)),),
                params={"cotangent": {"seed": 1}, "direction": {"seed": 2}, "second": {"seed": 3}})
    verdict = run_check("forward2", Target("corrcoef_rows", torch.corrcoef, "x: 2 3"), case)
    assert verdict.kind == "inconclusive", verdict
    assert "not finite at this input" in verdict.message, verdict.message


class _CubeWithoutJvp(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x**3

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * g * x * x


def test_a_function_without_jvp_has_its_reverse_identities_checked_and_no_forward_ones():
    """jacfwd(jacfwd) of a Function without jvp fails torch's internal assert
    ("flat_bdims must not be None") where nested jvp says NotImplementedError:
    every forward-mode identity is refused, and the reverse ones still pass."""
    report = fuzzdiff.check(_CubeWithoutJvp.apply, "x: n m", checks=("forward2",), max_examples=60, seed=0)
    row = report.row("forward2")
    assert report.ok and row["failed"] == 0 and row["passed"] > 0, report.summary()


def test_a_second_derivative_through_a_kink_of_a_repeated_argument_is_inconclusive():
    """dist(x, x) is the norm at 0, its kink, whatever x is: torch's second
    derivatives are nan there, the finite differences of a constant 0. A
    neighbour that passes x twice never leaves the kink; one that unties the
    arguments does, and the discrepancy vanishes there."""
    from fuzzdiff.case.case import Arg, Case
    from fuzzdiff.case.layout import Alias
    from fuzzdiff.targets.target import Target
    from fuzzdiff.case.values import Values

    values = Values(seed=1, low=-2.0, high=2.0)
    case = Case("dist", (Arg((3, 4), values), Arg((3, 4), values, alias=Alias(0, "same"))),
                params={"cotangent": {"seed": 1}, "direction": {"seed": 2}, "second": {"seed": 3}})
    verdict = run_check("forward2", Target("dist", torch.dist, "x: 3 4, y: 3 4"), case)
    assert verdict.kind == "inconclusive", verdict
    assert "neighbouring point off the repeated argument" in verdict.message, verdict.message
    assert case.repeated and not case.nudged(1e-3, seed=1, keep_structure=False).repeated


def test_a_finite_second_derivative_where_the_first_is_nan_is_inconclusive():
    """corrcoef of constant rows is nan, and so is its gradient; nested jvp
    reads 0 through the clamp (its jvp drops a nan input's tangent). The
    finite differences' round-off, taken from the gradient at the point, is
    nan: no tolerance could pass, and there is no derivative to check."""
    from fuzzdiff.case.case import Arg, Case
    from fuzzdiff.targets.target import Target
    from fuzzdiff.case.values import Values

    case = Case("corrcoef_rows", (Arg((2, 3), Values(seed=1, low=-2.0, high=2.0, constant=(1,))),),
                params={"cotangent": {"seed": 1}, "direction": {"seed": 2}, "second": {"seed": 3}})
    verdict = run_check("forward2", Target("corrcoef_rows", torch.corrcoef, "x: 2 3"), case)
    assert verdict.kind == "inconclusive", verdict
    assert "not finite at this input" in verdict.message, verdict.message


def test_a_float32_nan_at_a_repeated_argument_is_inconclusive_though_the_neighbours_round():
    """dist(x, x) for a stride-0 x (one value): the neighbours that untie
    it have x - y along the directions (constant too), where the second
    derivative is 0 and float32 returns its rounding, beyond tolerance. The
    nan, not the rounding, was the discrepancy: it is gone there. And the
    untied copy stays put while x moves, so that the tie breaks even when two
    clipped steps would coincide."""
    from fuzzdiff.case.case import Arg, Case
    from fuzzdiff.case.layout import Alias, Layout
    from fuzzdiff.targets.target import Target
    from fuzzdiff.case.values import Values

    values = Values(seed=0, low=-8.7, high=8.9, grid=0.25, constant=(0, 1))
    one = Layout(storage_size=1, strides=(0, 0))
    case = Case("dist", (Arg((5, 5), values, one), Arg((5, 5), values, alias=Alias(0, "same"))), dtype="float32",
                params={"cotangent": {"seed": 1}, "direction": {"seed": 2}, "second": {"seed": 3}})
    verdict = run_check("forward2", Target("dist", torch.dist, "x: 5 5, y: 5 5"), case)
    assert verdict.kind == "inconclusive", verdict
    for k in range(1, 9):
        x, y = case.nudged(1e-3, seed=k, keep_structure=False).materialize().leaves
        assert not torch.equal(x, y)
