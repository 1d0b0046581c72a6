"""The checkpoint check: a target under torch.utils.checkpoint, reentrant or
not, against its plain call; random targets at the same draws on both sides.
"""

from __future__ import annotations

import itertools
import random
import warnings
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from torch.autograd import Function

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.checks.checkpoint import CHECK, params
from fuzzdiff.targets.known import matching
from fuzzdiff.search.runner import case_strategy, run_check
from fuzzdiff.targets import get_target
from fuzzdiff.targets.catalog.random_layers import RRELU_EARLY_STOP
from fuzzdiff.targets.target import Target
from fuzzdiff.case.values import Values
from tests.selftest.zoo import by_name

DROP_PATH = by_name("drop_path_python_random")


def case_of(target: Target, *shapes, reentrant: bool, seed: int = 3, **kwargs) -> Case:
    args = tuple(Arg(s, Values(seed=seed + k)) for k, s in enumerate(shapes))
    return Case(target.ref, args, kwargs=kwargs,
                params={"reentrant": reentrant, "rng": {"seed": seed}, "cotangent": {"seed": seed}})


def verdicts(target: Target, *shapes, seeds=range(8), **kwargs) -> list:
    return [run_check(CHECK, target, case_of(target, *shapes, reentrant=r, seed=s, **kwargs))
            for r in (False, True) for s in seeds]


# -- right targets pass in both variants ----------------------------------------------

@pytest.mark.parametrize("name,shapes,kwargs", [("mul", [(2, 3), (2, 3)], {}), ("matmul", [(2, 3), (3, 4)], {}),
                                                ("softmax", [(3, 4)], {"dim": 0})])
def test_catalog_targets_pass_in_both_variants(name, shapes, kwargs):
    target = get_target(name)
    assert {v.kind for v in verdicts(target, *shapes, seeds=(1, 2), **kwargs)} == {"pass"}


def _sort(x):
    return torch.sort(x, dim=-1)  # a named tuple with an integer tensor in it


def _scaled(x, *, scale):
    return {"y": x * scale, "n": torch.tensor(x.numel())}


def test_pytrees_integer_outputs_and_keyword_arguments():
    """The reentrant variant's autograd.Function returns tensors only, and takes no
    keyword arguments: both are handled around it."""
    assert {v.kind for v in verdicts(Target("unit_sort", _sort, "x: n m"), (3, 4), seeds=(1,))} == {"pass"}
    scaled = Target("unit_scaled", _scaled, "x: n")
    assert {v.kind for v in verdicts(scaled, (5,), seeds=(1,), scale=2.5)} == {"pass"}


def test_dropout_in_training_mode_passes():
    """preserve_rng_state: the recomputation draws the very mask the forward drew."""
    dropout = Target("unit_dropout", lambda x: F.dropout(x, 0.5, training=True), "x: n m", random=True)
    assert {v.kind for v in verdicts(dropout, (4, 5))} == {"pass"}


def test_rrelu_under_non_reentrant_checkpoint_is_the_known_discrepancy():
    """RReLU draws the right slopes in both variants, but non-reentrant checkpoint's
    early stop leaves its noise buffer unwritten (RRELU_EARLY_STOP): the gradient
    reads whatever that memory holds, where the plain call repeats bit for bit."""
    target = get_target("rrelu_training")
    reentrant = [run_check(CHECK, target, case_of(target, (4, 5), reentrant=True, seed=s)) for s in range(4)]
    assert {v.kind for v in reentrant} == {"pass"}
    # The unwritten buffer may hold what the first forward freed there, the right
    # slopes: a seed can pass. Every failure is this one, and some seed fails.
    failures = 0
    for s in range(8):
        case = case_of(target, (4, 5), reentrant=False, seed=s)
        verdict = run_check(CHECK, target, case)
        if verdict.kind != "fail":  # the right slopes, or garbage the ladder doubts
            continue
        failures += 1
        assert matching(target.known, "checkpoint", case, verdict) is RRELU_EARLY_STOP
    assert failures > 0


# -- recomputation that draws other random numbers is found -------------------------------

def test_python_random_in_a_checkpointed_layer_is_found():
    """Stochastic depth's coin from Python's random: checkpoint restores torch's
    generators for its recomputation, not Python's. Found in both variants, in the
    gradients (the outputs are the first forward's); its twin passes."""
    found = verdicts(DROP_PATH.bug, (3,))
    failed = [v for v in found if v.kind == "fail"]
    assert {v.kind for v in found} == {"pass", "fail"}  # when both draws give the same coin, it passes
    assert {"use_reentrant=True", "use_reentrant=False"} == {v.message.split(")")[0].split("(")[1] for v in failed}
    assert all(v.errors["where"].startswith("grad") and "survived a repeat" in v.message for v in failed)
    assert {v.kind for v in verdicts(DROP_PATH.twin, (3,))} == {"pass"}


_private = torch.Generator()


def private_generator_dropout(x):
    mask = torch.rand(x.shape, generator=_private) >= 0.5
    return x * mask.to(x.dtype) * 2


def test_a_private_generator_is_found_or_inconclusive_never_passed_off():
    """A private torch.Generator is neither seeded by fuzzdiff nor restored by
    checkpoint: each call draws anew, so a repeat differs (nondeterministic, not a
    failure) unless the draws happen to repeat; it is never a pass with other masks."""
    target = Target("unit_private", private_generator_dropout, "x: n", random=True)
    kinds = {v.kind for v in verdicts(target, (6,))}
    assert kinds <= {"inconclusive", "pass"} and "inconclusive" in kinds


_calls = itertools.count()


def drifting(x):
    return x * (1 + next(_calls))


def test_a_nondeterministic_target_is_inconclusive():
    kinds = {v.kind for v in verdicts(Target("unit_drifting", drifting, "x: n"), (4,))}
    assert kinds == {"inconclusive"}


# -- fuzzdiff is a guest: the caller's generators are untouched ---------------------------

def test_the_callers_generator_states_are_restored():
    torch.manual_seed(1234)
    random.seed(1234)
    torch_state, python_state = torch.get_rng_state(), random.getstate()
    for check in ("checkpoint", "grad"):
        for target in (DROP_PATH.bug, DROP_PATH.twin):
            run_check(check, target, case_of(target, (3,), reentrant=True))
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert random.getstate() == python_state


class DropoutForgetsScale(Function):
    """Dropout at p = 1/2 whose backward forgets the 1 / (1 - p) scale."""

    @staticmethod
    def forward(ctx, x):
        mask = (torch.rand(x.shape) >= 0.5).to(x.dtype)
        ctx.save_for_backward(mask)
        return x * mask * 2

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return g * mask


def test_other_checks_call_a_random_target_with_its_generators_seeded_alike():
    """Seeded before every call, a dropout is a function of its input, and the grad
    check finds its wrong backward; undeclared, each call draws another mask and
    the finite differences are noise (never a confirmed failure)."""
    declared = Target("unit_dropout_scale", DropoutForgetsScale.apply, "x: n", random=True)
    case = Case(declared.ref, (Arg((6,), Values(seed=5)),), params={"cotangent": {"seed": 1},
                                                                   "direction": {"seed": 2}})
    assert run_check("grad", declared, case).kind == "fail"
    assert run_check("grad", replace(declared, random=False), case).kind != "fail"


# -- what is drawn ----------------------------------------------------------------------

def test_params_draw_both_variants_and_a_seed_that_variants_vary():
    target = get_target("mul")
    seen = set()

    @settings(max_examples=40, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(case_strategy(CHECK, target))
    def draw(case):
        seen.add(case.params["reentrant"])
        assert case.reseeded(1).params["rng"]["seed"] != case.params["rng"]["seed"]

    draw()
    assert seen == {False, True}
    fixed = Case("mul", (Arg((2,), grad="none"), Arg((2,), grad="none")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # .example() outside @given: one draw is all this needs
        assert params(target, fixed).example()["reentrant"] is False


def test_applies_to_random_targets_not_to_mutating_ones():
    assert CHECK.why_not(DROP_PATH.bug) is None
    assert "writes its inputs" in CHECK.why_not(get_target("program_inplace"))


def test_dropout_is_not_compared_across_layouts():
    """From one seed, dropout drops other elements of the same values in
    another memory layout (its mask follows empty_like(x)): the layout check
    would call that a bug. If torch ever draws in logical order, the skip goes."""
    x = torch.arange(1.0, 5.0, dtype=torch.float64).reshape(2, 2)
    torch.manual_seed(3)
    a = F.dropout(x, 0.5)
    torch.manual_seed(3)
    b = F.dropout(x.t().contiguous().t(), 0.5)
    assert not torch.equal(a, b)
    case = Case("dropout_training", (Arg((2, 2), Values(seed=1)),), kwargs={"p": 0.5},
                params={"layouts": [{"offset": 0, "storage_size": 4, "strides": [1, 2]}]})
    verdict = run_check("layout", get_target("dropout_training"), case)
    assert verdict.kind == "unsupported" and "memory layout" in verdict.message
