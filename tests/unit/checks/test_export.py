"""The export check: correct targets pass in every variant, and an op whose
decomposition differs from its own kernel is caught after run_decompositions()."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import HealthCheck, find, settings

from fuzzdiff.case.case import Case
from fuzzdiff.case.spec import parse_spec
from fuzzdiff.checks import get_check
from fuzzdiff.paths import exported as path
from fuzzdiff.search.runner import case_strategy, run_check
from fuzzdiff.targets import get_target
from fuzzdiff.targets.target import Target

CHECK = get_check("export")
FIND = settings(max_examples=200, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
VARIANTS = [{"strict": s, "decomposed": d} for s in (False, True) for d in (False, True)]

# An op whose CompositeImplicitAutograd kernel is sin at real tensors and twice
# sin when traced: export keeps the op as it is, run_decompositions() inlines
# the traced kernel. Eager and the exported program run the op itself.
_LIB = torch.library.Library("fuzzdiff_unit_export", "DEF")  # noqa: TOR901 - a test-only op
_LIB.define("planted(Tensor x) -> Tensor")


def _planted(x):
    return x.sin() if type(x) is torch.Tensor else 2 * x.sin()


_LIB.impl("planted", _planted, "CompositeImplicitAutograd")
PLANTED = Target(
    "unit_decomposition_differs", torch.ops.fuzzdiff_unit_export.planted, "x: n>=1", dtypes=(torch.float64,)
)


def a_case(target: Target, **params) -> Case:
    case = find(case_strategy(CHECK, target), lambda c: True, settings=FIND)
    return replace(case, params={**case.params, **params})


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("target", ["sin", "mul"])
def test_a_correct_target_passes(target, variant):
    verdict = run_check(CHECK, target, a_case(get_target(target), **variant))
    assert verdict.kind == "pass", verdict


@pytest.mark.parametrize("strict", [False, True])
def test_a_decomposition_that_differs_fails_after_run_decompositions(strict):
    verdict = run_check(CHECK, PLANTED, a_case(PLANTED, strict=strict, decomposed=True))
    assert verdict.kind == "fail", verdict
    assert "run_decompositions()" in verdict.message and "output 0" in verdict.message


@pytest.mark.parametrize("strict", [False, True])
def test_the_planted_op_passes_as_exported(strict):
    """The failure above is the decomposition's: the program as traced keeps the op."""
    verdict = run_check(CHECK, PLANTED, a_case(PLANTED, strict=strict, decomposed=False))
    assert verdict.kind == "pass", verdict


def test_data_dependent_control_flow_is_unsupported():
    target = Target("unit_branchy", lambda x: x.sin() if x.sum() > 0 else x.cos(), "x: n>=1")
    verdict = run_check(CHECK, target, a_case(target, strict=False, decomposed=False))
    assert verdict.kind == "unsupported", verdict


def test_the_spec_s_free_dims_are_dynamic():
    specs = parse_spec("x: *b n 3, w: 3 m")
    assert path.dynamic_dims(specs, [(2, 5, 4, 3), (3, 1)]) == [(0, 1, 2), (1,)]
