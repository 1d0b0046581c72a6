"""Running one check on one case, and turning exceptions into verdicts.

An op that lacks a forward-mode formula, double backward or complex support
raises; that is "unsupported", never a failure. Any other exception from the
target at a valid input is a finding, reported as a failure once it repeats.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Set
from dataclasses import dataclass, replace
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import UnsatisfiedAssumption
from torch.utils._pytree import tree_leaves

from fuzzdiff.case.case import Case
from fuzzdiff.case.layout import CaseError
from fuzzdiff.checks import Check, get_check
from fuzzdiff.checks.check import ProbeParams
from fuzzdiff.confirm.ladder import Ladder
from fuzzdiff.confirm.steps import NUDGE, repeat
from fuzzdiff.guards import cuda_context, torch_state
from fuzzdiff.guards.precision import cuda_present, ieee_float32
from fuzzdiff.guards.raised import Raised, raised
from fuzzdiff.guards.random_ops import random_ops
from fuzzdiff.guards.torch_state import Left, kept, let_go
from fuzzdiff.guards.unsupported import unsupported_reason
from fuzzdiff.paths.seeded import reseeding, run_seeded
from fuzzdiff.search.op_points import REPEATED_SPECTRUM, spectrum_met
from fuzzdiff.targets import get_target
from fuzzdiff.targets.randomness import SEEDED_SKIPS
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict
from strategies.cases import CasePlan, case_plan, draw_case
from strategies.cotangents import draw_probe_dicts

__all__ = ["run_check", "verdict_at", "case_strategy", "check_case_plan", "EXCEPTION_LADDER"]

# A target's exception at a valid input is confirmed by a repeat that raises
# it again. Its verdict keeps the exception's own words ("raised T: message"),
# which known discrepancies and root causes match, so the runner words it.
EXCEPTION_LADDER = Ladder(("repeat",))


RANDOM_LOW_PRECISION_ON_CUDA = (
    "the target draws random numbers, and on CUDA a float64 run draws other numbers than a "
    "lower-precision one from the same seed, so the float64 reference would be another function"
)
RANDOM_STRIDED_ON_CUDA = (
    "the target draws random numbers, and on CUDA its kernels draw in their input's memory layout: "
    "the finite differences, made at dense copies of a strided leaf, would see other draws"
)


def _unfair_on_cuda(case: Case) -> str | None:
    """Why a random target's calls at ``case`` cannot be compared on CUDA, where
    one seed gives other draws for another dtype or memory layout (the CPU's
    generators draw in logical order, in double precision)."""
    if not case.device.startswith("cuda"):
        return None
    if case.dtype != "float64":
        return RANDOM_LOW_PRECISION_ON_CUDA
    if any(a.grad == "leaf" and a.layout is not None and not a.layout.is_contiguous(a.shape) for a in case.args):
        return RANDOM_STRIDED_ON_CUDA
    return None


def run_check(check: Check | str, target: Target | str, case: Case) -> Verdict:
    """The check's verdict at ``case``; never raises for the target's own errors."""
    check = get_check(check) if isinstance(check, str) else check
    target = get_target(target) if isinstance(target, str) else target
    why = check.why_not(target)
    if why is not None:
        return Verdict("unsupported", why)
    return verdict_at(check, target, case)


def verdict_at(check: Check, target: Target, case: Case) -> Verdict:
    """``run_check`` for a check already known to apply: ``fuzz()`` asks
    ``why_not`` once per run rather than once per example. With a GPU present
    it runs in IEEE float32 (fuzzdiff.guards.precision: no TF32). A random target
    has its generators seeded alike before every call (fuzzdiff.paths.seeded),
    unless the check seeds them itself."""
    if target.random and not check.seeds_random:
        unfair = _unfair_on_cuda(case)
        if unfair is not None:
            return Verdict("unsupported", unfair)
        seed = sum(a.values.seed for a in case.args) % 2**32
        devices = [torch.device(case.device).index or 0] if case.device.startswith("cuda") else []
        fixed = replace(target, fn=reseeding(target.fn, seed, devices))
        seeded = run_seeded(seed, lambda: _precise_verdict(check, fixed, case), devices)
        return _other_draws(seeded) if seeded.failed and "vs_float64" in seeded.errors else seeded
    verdict = _precise_verdict(check, target, case)
    if verdict.failed and "vs_float64" in verdict.errors and target.module is None:
        # confirmed against float64's run of the same values: of the same function, unless
        # the function draws its own random numbers, which differ by dtype
        drawn = random_ops(lambda: _plain_call(target, case))
        if drawn:
            return _other_draws(verdict, drawn)
    if verdict.failed and check.name in AT_SPECTRUM and not verdict.errors.get("exception") and target.module is None:
        met = spectrum_met(lambda: _plain_call(target, case))
        if met is not None:  # documented: no derivative there, whatever either dtype computes
            return Verdict("inconclusive", f"{verdict.message}; unconfirmed: {met} runs {REPEATED_SPECTRUM}")
    if verdict.failed and check.name in SEEDED_SKIPS and target.module is None:
        # a generator the function seeds itself draws alike in two calls (the randomness
        # question then finds nothing, or was not asked in time), not in two dtypes or layouts;
        # a module target's call builds its module, whose initialization draws (its random
        # layers are found from the module itself, fuzzdiff.targets.user)
        drawn = random_ops(lambda: _plain_call(target, case))
        if drawn:
            return Verdict("unsupported", f"{SEEDED_SKIPS[check.name]} (here: {', '.join(sorted(drawn))})")
    return verdict


# the checks that judge a derivative's value, which a spectral op at repeated values does not have
AT_SPECTRUM = ("grad", "forward", "gradgrad", "forward2", "dtype")

OTHER_DRAWS = (
    "the function draws random numbers, and from one seed float64 draws other numbers: float64's "
    "run is of another function, no reference for the low precision's"
)


def _other_draws(verdict: Verdict, drawn: Set[str] = frozenset()) -> Verdict:
    """A low-precision failure confirmed against float64's run, of a function
    whose random draws differ by dtype: unconfirmed."""
    here = f" (here: {', '.join(sorted(drawn))})" if drawn else ""
    return Verdict("inconclusive", f"{verdict.message}; unconfirmed: {OTHER_DRAWS}{here}", verdict.errors)


def _plain_call(target: Target, case: Case) -> Any:
    with torch.no_grad():
        return target(*case.materialize(requires_grad=False).args, **case.kwargs)


def _precise_verdict(check: Check, target: Target, case: Case) -> Verdict:
    if not cuda_present():
        return _verdict(check, target, case)
    with ieee_float32():
        return _verdict(check, target, case)


def _verdict(check: Check, target: Target, case: Case) -> Verdict:
    outcome, left = _attempt(check, target, case)
    if isinstance(outcome, Verdict):
        if left:
            return replace(outcome, errors={**outcome.errors, "torch_state": str(left)})
        return outcome
    first = outcome.error
    if cuda_present():
        lost = cuda_context.verdict_after(first)
        if lost is not None:
            return lost
    reason = unsupported_reason(first)
    if reason is not None:
        return Verdict("unsupported", reason)
    if target.rejects(first):
        raise UnsatisfiedAssumption(f"outside the target's domain: {type(first).__name__}: {first}")
    if outcome.origin.internal or outcome.origin.part is not None:
        torch_state.note(f"{check.name} on {target.name} raised {type(first).__name__} in {outcome.origin.where}")
    finding = f"raised {type(first).__name__}: {first}"
    climbed = EXCEPTION_LADDER.ascend(
        {
            "repeat": repeat(
                lambda: _attempt(check, target, case)[0],
                same=lambda again: isinstance(again, _Raised) and _same_error(again.error, first),
                why=_repeated,
            )
        }
    )
    if climbed.doubt is not None:
        return Verdict("inconclusive", f"{finding} once; {climbed.doubt.why}")
    edge = _domain_edge(target, case, first, outcome.origin.where) or _undefined_here(target, case, outcome.origin)
    if edge is not None:
        return Verdict("inconclusive", f"{finding}; {edge}")
    errors = {"exception": type(first).__name__, "traceback": outcome.tail, **outcome.origin.as_errors()}
    if left:
        errors["torch_state"] = str(left)
    return Verdict("fail", finding, errors)


# Neighbouring points asked whether the function's own plain call raises there.
EDGE_NEIGHBOURS = 4
DOMAIN_EDGE = (
    "the function's plain call runs here and raises it at a neighbouring point: the case is at the "
    "edge of its domain, and a step the check takes (a finite difference, a probe) crosses it"
)


def _domain_edge(target: Target, case: Case, error: Exception, where: str) -> str | None:
    """Why ``error``, raised by a check at ``where``, is the function's own
    domain and not a finding: its plain call runs at ``case`` and raises the
    same error from the same line at a neighbouring point (an integral over
    [lo, hi] at lo == hi, whose finite differences step to lo > hi). None where
    the plain call raises at the case itself (the input-domain question's), or
    at no neighbour, or elsewhere (a backward that raises is no domain)."""
    try:
        _plain_call(target, case)
    except Exception:  # noqa: BLE001 - the input-domain question's, not this one's
        return None
    for seed in range(1, EDGE_NEIGHBOURS + 1):
        try:
            _plain_call(target, case.nudged(NUDGE, seed=seed, keep_structure=False))
        except Exception as e:  # noqa: BLE001 - compared below
            if _same_error(e, error) and raised(e).where == where:
                return DOMAIN_EDGE
    return None


# Where reverse mode's engine runs torch's backward formulas (a frame's words, from torch/ on).
_BACKWARD_ENGINE = "torch/autograd/graph.py:"
NOT_DIFFERENTIABLE_HERE = (
    "a backward formula of torch's raised it where the function's own output is not finite "
    "(log|det| of a singular matrix is -inf): no derivative to check here"
)


def _undefined_here(target: Target, case: Case, origin: Raised) -> str | None:
    """Why an error raised inside reverse mode's engine is no finding: the
    plain call's outputs at ``case`` hold inf or nan, where the derivative
    does not exist, and torch's formula may refuse it (slogdet's backward
    solves with the singular matrix: normflows' Invertible1x1Conv at a
    rank-one weight). None where the outputs are finite, or the error came
    from elsewhere (a backward of the code's own, an op's forward)."""
    if not origin.where.startswith(_BACKWARD_ENGINE) or origin.internal:
        return None
    try:
        outputs = tree_leaves(_plain_call(target, case))
    except Exception:  # noqa: BLE001 - the input-domain question's, not this one's
        return None
    floating = [o for o in outputs if isinstance(o, torch.Tensor) and (o.is_floating_point() or o.is_complex())]
    return NOT_DIFFERENTIABLE_HERE if any(not torch.isfinite(o).all() for o in floating) else None


def _same_error(again: Exception, first: Exception) -> bool:
    return type(again) is type(first) and _said(again) == _said(first)


# Where Python's recursion limit is met varies from run to run: so do the
# limit's wording ("... while calling a Python object") and the counts of a
# traceback's repeated lines that Dynamo puts into its message.
_RECURSION_WORDS = re.compile(r"maximum recursion depth exceeded[^\n]*")
_REPEATED_LINES = re.compile(r"\[Previous line repeated \d+ more times?\]")


def _said(error: Exception) -> str:
    text = _RECURSION_WORDS.sub("maximum recursion depth exceeded", str(error))
    return _REPEATED_LINES.sub("[Previous line repeated]", text)


def _repeated(again: Verdict | _Raised) -> str:
    """What the repeat of an exception did instead of raising it again."""
    if isinstance(again, Verdict):
        return "the repeat passed"
    return f"the repeat raised {type(again.error).__name__}: {again.error}"


@dataclass(frozen=True)
class _Raised:
    """A run's exception, its frames let go (``let_go``), with what the
    verdict needs of them: where it came from and the traceback's tail."""

    error: Exception
    origin: Raised
    tail: list[str]


def _attempt(check: Check, target: Target, case: Case) -> tuple[Verdict | _Raised, Left]:
    """One run of the check: its verdict or the target's exception, and what
    the run left changed of torch's thread-local state (put back already:
    the runs after it are not its victims; fuzzdiff.guards.torch_state)."""
    with kept() as left:
        try:
            outcome: Verdict | _Raised = check.run(target, case)
        except (CaseError, UnsatisfiedAssumption):
            raise  # a malformed case is the caller's error; a rejected one, outside the target's domain
        except Exception as e:  # noqa: BLE001 - the target's errors are findings
            outcome = _Raised(e, raised(e), traceback.format_exception(e)[-3:])
            let_go(e)
    if left:
        torch_state.note(f"{check.name} on {target.name}: {left}")
    return outcome, left


def case_strategy(check: Check, target: Target, **case_options) -> st.SearchStrategy[Case]:
    """Cases for ``target`` with the check's own params drawn and stored."""
    return _case_with_params(check_case_plan(check, target, **case_options), check, target)


def check_case_plan(check: Check, target: Target, **case_options) -> CasePlan:
    """The plan of ``target``'s cases for ``check``: the check's dtypes and
    aliasing, then the caller's ``case_options`` (its word wins, e.g. alias=False)."""
    options: dict[str, Any] = dict(
        dtypes=target.dtypes if check.dtypes is None else tuple(d for d in target.dtypes if d in check.dtypes),
        alias=check.aliasing != "never",
        require_alias=check.aliasing == "required",
    )
    options.update(case_options)
    return case_plan(target, **options)


# Every nested strategy draw costs Hypothesis time of its own (more than the
# torch work of a small example), so the case and its params are drawn in one
# composite, with plain drawing functions rather than nested strategies.
@st.composite
def _case_with_params(draw, plan: CasePlan, check: Check, target: Target) -> Case:
    case = draw_case(draw, plan)
    if isinstance(check.params, ProbeParams):  # the same draws, without a nested strategy
        params = draw_probe_dicts(draw, check.params.keys)
    else:
        params = draw(check.params(target, case))
    return replace(case, params=params)
