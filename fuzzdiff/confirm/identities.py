"""Confirming a discrepancy before it is called a failure.

Every derivative identity is measured as two numbers that should agree (say
``<J^T v, u>`` and a finite-difference ``<v, J u>``). A first disagreement is
only a suspicion: it becomes a failure once it survives a repeat, other
eps (and a reference steady under tiny changes of eps: no rounding noise),
two neighbouring points (a kink or a tie vanishes there) and, for low
precision, a float64 run on the same values: where the identity holds in
float64, the low-precision computation itself is judged against float64
(fuzzdiff.confirm.low_precision), with the problem's conditioning as the allowance.
Anything that does not survive is "inconclusive" — never a failure. The
steps shared with other checks (repeat, the kink test, the float64 step)
are fuzzdiff.confirm.steps'; those of finite differences alone are here.

At a structured point (fuzzdiff.case.structures) moving to a neighbour is the
wrong question: it moves off a tie of ``max`` (a kink: the discrepancy
vanishes, rightly inconclusive) but also off an exact zero of ``cumprod``
(smooth there: a backward that divides by x is wrong at the zero and right
everywhere else, and would be hidden). So the point itself is asked whether
it is a kink (fuzzdiff.confirm.steps.kink: do the right and left derivatives along u
differ, by a gap that does not shrink with the step?), and only then are
neighbours tried, with the structure kept (``Case.nudged``): a tie stays a
tie, a zero a zero. Whether a structure is a kink depends on the target
(zeros are kinks of ``abs``, not of ``prod``), so the function is asked, not
the structure's name. A second derivative asks it of the first derivative it
differentiates. An identity without a one-sided measure (a comparison of
whole results: vmap, compile) asks its neighbours, which keep the structure:
a tie stays a tie. Forward against reverse mode asks the function's one-sided
differences, as grad does.

An argument passed twice (``dist(x, x)``, ``Case.repeated``; or two all-zero
arguments, ``dist(0, 0)``) is a structure no kink test sees: ``x - x`` sits at the norm's kink whatever ``x`` is. For
the identities without a one-sided measure and for second derivatives, the
neighbours pass ``x``, moved, and a copy of it; there a non-finite analytic
side that is finite at a neighbour is a singularity of the point, however
low precision rounds the finite value. A first derivative keeps the tie:
it is well defined there (``nextafter(x, x)`` is ``x``).

A stride-0 layout repeats values (``Case.stride0``), which may make the point
singular where the values alone would not (repeated rows: a rank-deficient
matrix), and neighbours in that layout repeat them too. So the neighbours ask
the values, not the memory: a mismatch that vanishes once the target gets the
same values contiguously (``Case.copied``) is the layout's own, and its
neighbours keep the layout. One that persists meets the kink test at the same
values laid out contiguously (``Case.spread``: there directions move each
repeated value on its own), then neighbours that move each repeated value
independently; a kink, a singularity or a mismatch gone there is
inconclusive, "singular point (stride-0 input)".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch.utils._pytree import tree_leaves

from fuzzdiff.case.case import Case
from fuzzdiff.confirm.compare import Discrepancy, holds, max_abs
from fuzzdiff.confirm.ladder import Doubt, Ladder, Step, Survived, words
from fuzzdiff.confirm.low_precision import LowPrecision, against_float64
from fuzzdiff.confirm.rounding import RoundingNoise
from fuzzdiff.confirm.steps import (
    CONTIGUOUS,
    COPIED,
    LEAF_OWN,
    NUDGE,
    SINGULAR,
    UNTIED,
    Sided,
    float64_or_accuracy,
    identical,
    kink,
    layout_own,
    neighbours,
    repeat,
)
from fuzzdiff.confirm.stopping import Stopping
from fuzzdiff.confirm.tolerance import Tolerance
from fuzzdiff.guards.unsupported import unsupported_reason
from fuzzdiff.verdict import Verdict

__all__ = [
    "Measurement",
    "judge",
    "judged",
    "worst",
    "confirm_mismatch",
    "FD_LADDER",
    "MISMATCH_LADDER",
    "EPS",
    "STOPPING_TOLERANCE",
]

EPS = 1e-6  # finite-difference step in float64, along a direction of norm ~1 per element
JITTER = (1e-3, -1e-3)  # relative changes of eps that expose rounding noise in a reference


class Measurement(NamedTuple):
    """Two sides of one identity, with the scale and the reference's own error.
    (A named tuple: one is made per example and per confirmation step.)"""

    analytic: float
    reference: float
    scale: float
    noise: float = 0.0
    # the function's own value (for a second derivative: and its first
    # derivative) is finite at the point; measures ask only when in doubt
    defined: bool = True

    @property
    def error(self) -> float:
        if math.isnan(self.analytic) != math.isnan(self.reference):
            return math.inf
        if self.analytic == self.reference:  # also equal infinities
            return 0.0
        return abs(self.analytic - self.reference)

    def within(self, tol: Tolerance) -> bool:
        return tol.allows(self.error, self.scale, self.noise)

    def summary(self) -> dict:
        return {
            "analytic": self.analytic,
            "reference": self.reference,
            "abs_error": self.error,
            "scale": self.scale,
            "reference_noise": self.noise,
        }


Measure = Callable[[Case, float], Measurement]


# The finite-difference identities' ladder (grad, forward, gradgrad, forward2).
FD_LADDER = Ladder(("repeat", "eps", "jitter", "neighbours", "rounding", "float64", "stopping"))
# The rounding step: the analytic side is rounding's where every intermediate
# result moved by the dtype's rounding moves it by this part of the error.
ROUNDING_SHARE = 0.1
# How far, as a part of the derivatives' scale, a solver's stopping tolerance may
# leave the slope of the function as computed from that of the exact solution its
# derivative rule differentiates (the stopping step): xitorch's rootfinder at its
# defaults leaves 6e-6; a larger mismatch is no tolerance's, a wrong rule's is O(1).
STOPPING_TOLERANCE = 1e-4


def judge(
    identity: str,
    measure: Measure,
    case: Case,
    tol: Tolerance,
    *,
    measure64: Measure | None = None,
    eps: float = EPS,
    sided: Sided | None = None,
    second_order: bool = False,
    point_out_of_range: Callable[[Case], str | None] | None = None,
    stopping: Callable[[Case], Stopping | None] | None = None,
) -> Verdict:
    """Pass, or climb FD_LADDER with the discrepancy of ``measure`` at ``case``.

    ``measure64`` is the same identity with the analytic side computed in
    float64 on the case's exact values; it is given for low-precision cases.
    ``point_out_of_range`` says where the point's values or derivatives leave
    the case's dtype's range (fuzzdiff.checks.grad): there an analytic side
    that is not finite is out of range, not wrong (in low precision, where
    float64's agrees: the float64 step).
    ``sided`` gives the one-sided differences of the finite-difference side,
    for the kink test at a structured point (see the module's docstring).
    ``second_order``: the identity differentiates a first derivative, which a
    repeated argument (``dist(x, x)``) may hold at a kink whatever its values.
    ``stopping`` says whether a derivative rule of the code's own
    replaces the derivative of a loop that stops on its values at a case
    (fuzzdiff.confirm.stopping.stopping_rule): the stopping step.
    """
    first = measure(case, eps)
    error, allowed = first.error, tol.allowed(first.scale, first.noise)
    if error <= allowed:
        # The error rides along so that hypothesis.target() can steer toward it.
        return Verdict("pass", "", {"abs_error": error, "scale": first.scale, "allowed": allowed})
    if not math.isfinite(first.reference):
        return _unsure(identity, "the reference is not finite here", first)
    if not first.defined:
        # e.g. corrcoef of constant rows: nan at the point, finite around it; in
        # low precision, exp(100) in float32 (its derivatives: inf * 0 is nan)
        beyond = point_out_of_range(case) if point_out_of_range is not None and measure64 is not None else None
        where = f" in {case.dtype} (out of range for {case.dtype}: {beyond})" if beyond else ""
        why = f"the function itself is not finite at this input{where}: no derivative to check"
        return _unsure(identity, why, first)
    if measure64 is None and point_out_of_range is not None and not holds(case.torch_dtype, first.analytic):
        # no float64 step to ask: a derivative along the probes beyond float64's own range
        # is inf, and inf times a zero entry of a probe is nan (sinh(709.78)'s second derivative)
        beyond = point_out_of_range(case)
        if beyond is not None:
            return _unsure(identity, f"out of range for {case.dtype}: {beyond}", first)

    steps: dict[str, Step] = {
        # both sides: a reference that is another mode of autograd (forward vs
        # reverse) may read memory it should not, and change from run to run
        "repeat": repeat(
            lambda: measure(case, eps),
            same=lambda again: identical((again.analytic, again.reference), (first.analytic, first.reference)),
            why=lambda again: (
                f"a repeat gave {again.analytic!r} vs {again.reference!r}, first run {first.analytic!r} vs "
                f"{first.reference!r}"
            ),
        ),
        "eps": _other_eps(measure, case, tol, first, eps),
        "jitter": _jitter(measure, case, tol, first, eps),
        "rounding": _rounding(measure, case, first, eps),
        "neighbours": _neighbours(measure, case, tol, first, eps, sided, second_order),
    }
    if measure64 is not None:
        steps["float64"] = _float64(measure64, case, tol, first, eps, point_out_of_range)
    if stopping is not None:
        steps["stopping"] = _stopping(stopping, case, tol, first)
    bound = f"allowed {allowed:.3g}" if math.isfinite(allowed) else f"no tolerance applies: {_not_finite(first)}"
    return FD_LADDER.climb(
        identity,
        f"analytic {first.analytic!r} vs reference {first.reference!r} (abs error {first.error:.3g}, {bound})",
        first.summary(),
        steps,
    )


# -- the finite-difference identities' own steps ---------------------------------------------


def _other_eps(measure: Measure, case: Case, tol: Tolerance, first: Measurement, eps: float) -> Step:
    """The eps step: a reference that agrees at another step (eps/8, 8*eps,
    or one below the scale of a point near zero) was wrong, not the target;
    one that grows like 1/eps is a quotient across a jump."""

    def step() -> Doubt | None:
        seen = []
        for other in (eps / 8, eps * 8):
            m = measure(case, other)
            if m.within(tol):
                return Doubt(f"agrees at eps={other:g}: finite differences are unreliable here")
            seen.append(m.reference)
        small = _step_below(case, eps)
        if small is not None:
            # Inputs at or near zero: a step of eps may jump over the whole of
            # the function's structure there, and eps/8 with it. A step below
            # it decides, where it is precise enough to have shown the
            # mismatch (x + 1 near zero rounds every such step away). Agreeing
            # there, the analytic side is the derivative: the limit of the
            # differences as the step shrinks.
            m = measure(case, small)
            if m.within(tol) and 4 * m.noise <= first.error / 8:
                return Doubt(
                    f"agrees at eps={small:g}: near zero, the function changes on a scale below eps={eps:g} "
                    "(finite differences at eps are unreliable here)"
                )
        fine, coarse = seen
        if _grows_like_a_jump(coarse, first.reference, fine):
            # rounding noise may grow as eps shrinks too, but it does not stay put when eps moves by 0.1%
            steady = measure(case, eps * (1 + JITTER[0])).reference
            if abs(steady - first.reference) <= 0.01 * abs(first.reference):
                return Doubt(
                    f"the reference grows as eps shrinks ({coarse!r}, {first.reference!r}, {fine!r} at 8*eps, eps, "
                    "eps/8): the differentiated function jumps here"
                )
        return None

    return step


def _jitter(measure: Measure, case: Case, tol: Tolerance, first: Measurement, eps: float) -> Step:
    """The jitter step: rounding noise no step size removes (a function
    computed with cancellation). Steps JITTER apart leave the truncation error
    alone but move the points far past the rounding pattern, so the reference
    moves by its own noise. Counted as the reference's error, may it explain all?"""

    def step() -> Doubt | None:
        spread = max(abs(measure(case, eps * (1 + j)).reference - first.reference) for j in JITTER)
        if first._replace(noise=first.noise + spread).within(tol):
            if not identical(measure(case, eps).reference, first.reference):
                return Doubt("the reference changes from run to run at the same eps (nondeterministic)")
            return Doubt(
                f"the reference moves by {spread:.3g} when eps changes by {JITTER[0]:.1%}: it is rounding noise here"
            )
        return None

    return step


def _rounding(measure: Measure, case: Case, first: Measurement, eps: float) -> Step:
    """The rounding step: an analytic side that is a sum of large terms
    that cancel (a gradient that is zero along the probe, computed through
    layer norms of constant rows at 1/sqrt(eps) each) is rounding noise, and
    no step of the reference shows it. Where every intermediate result moved
    by rounding (RoundingNoise, float64 Monte Carlo arithmetic) moves the
    analytic side by ROUNDING_SHARE of the error, neither side is wrong.
    Float64 cases only: a low-precision one has the float64 step."""

    def step() -> Doubt | None:
        if case.torch_dtype != torch.float64 or not math.isfinite(first.analytic):
            return None  # a nan or an infinity is no sum that cancels
        unit = torch.finfo(torch.float64).eps / 2
        for seed in (1, 2):
            mode = RoundingNoise(unit, seed=seed, tiny=0.0)
            try:
                with mode:
                    moved = measure(case, eps).analytic
            except Exception:  # noqa: BLE001 - an index from a float moved off its integer: no answer
                return None
            if not math.isfinite(moved):
                return None  # moved off its domain: no answer
            if abs(moved - first.analytic) >= ROUNDING_SHARE * first.error:
                if mode.lowered:
                    return Doubt(
                        f"the analytic side moves from {first.analytic!r} to {moved!r} when every intermediate "
                        f"result moves by its rounding, and the code computes in {words(sorted(mode.lowered))} "
                        "inside (a cast down): its derivatives hold to that precision, not float64's"
                    )
                return Doubt(
                    f"the analytic side moves from {first.analytic!r} to {moved!r} when every intermediate "
                    "result moves by float64 rounding: large terms that cancel (ill-conditioned here)"
                )
        return None

    return step


def _neighbours(
    measure: Measure,
    case: Case,
    tol: Tolerance,
    first: Measurement,
    eps: float,
    sided: Sided | None,
    second_order: bool,
) -> Step:
    """The neighbours step of an identity with a measure: two neighbouring
    points, the kink test first at a structured point, and at a stride-0
    input the values asked rather than the memory (see the module's docstring)."""

    def step() -> Doubt | Survived:
        if not case.stride0:
            return around()
        # A stride-0 layout repeats values, which may make the point singular
        # (repeated rows: a rank-deficient matrix) where the values alone would
        # not: the question is asked of the values (see the module's docstring).
        if measure(case.copied(), eps).within(tol):
            return layout_own(around())
        spread, evidence = case.spread(), ""
        if sided is not None:
            doubt = kink(sided, spread, eps, tol, first.scale, math.isfinite(first.analytic), where=CONTIGUOUS)()
            if isinstance(doubt, Doubt):
                return Doubt(f"{SINGULAR}: {doubt.why.removeprefix('a singular point: ')}")
            evidence = f"no kink at {CONTIGUOUS} (along u or a dense direction), "
            if measure(spread, eps).within(tol):
                # smooth at these values, and right once they are laid out contiguously:
                # the mismatch needs the stride-0 leaf itself (a bug of that layout)
                found = around()
                if isinstance(found, Doubt):
                    return found
                return Survived(f"{evidence}{found.label} ({LEAF_OWN})", found.errors)
            if case.structured or case.repeated:
                # their neighbours keep the structure (a zero of cumprod stays a zero)
                found = around()
                return found if isinstance(found, Doubt) else Survived(evidence + found.label, found.errors)
        for k in (1, 2):
            near = measure(spread.nudged(NUDGE, seed=k, keep_structure=False), eps)
            if near.within(tol):
                return Doubt(f"{SINGULAR}: vanishes at a neighbouring point {UNTIED}")
            if not math.isfinite(first.analytic) and math.isfinite(near.analytic):
                return Doubt(
                    f"{SINGULAR}: {first.analytic!r} only at the point, finite at a neighbouring point {UNTIED}"
                )
        return Survived(f"{evidence}{COPIED} and two neighbouring points {UNTIED}")

    def around() -> Doubt | Survived:
        # A repeated argument (dist(x, x)) is a tie no move of the values
        # breaks, and no kink test sees (x - x is zero along every direction):
        # where the identity has no one-sided measure, or differentiates a first
        # derivative, the neighbours untie it. A first derivative keeps the tie,
        # since it is well defined there (nextafter(x, x) is x).
        untie = case.repeated and (sided is None or second_order)
        if not case.structured and not untie:
            for k in (1, 2):
                if measure(case.nudged(NUDGE, seed=k), eps).within(tol):
                    return Doubt("vanishes at a neighbouring point (a kink or a tie)")
            return Survived("two neighbouring points")
        if sided is None or not case.structured or untie:
            point = "structured point" if case.structured else "repeated argument"
            for k in (1, 2):
                near = measure(case.nudged(NUDGE, seed=k, keep_structure=False), eps)
                if near.within(tol):
                    return Doubt(f"vanishes at a neighbouring point off the {point} (a kink or a tie)")
                if not math.isfinite(first.analytic) and math.isfinite(near.analytic):
                    # a singularity of the point; how well low precision computes
                    # the finite value there is the float64 step's question, not this one
                    return Doubt(f"{first.analytic!r} only at the {point}: finite at a neighbouring point off it")
            return Survived(f"two neighbouring points off the {point}")
        doubt = kink(sided, case, eps, tol, first.scale, finite=math.isfinite(first.analytic))()
        if isinstance(doubt, Doubt):
            return doubt
        for k in (1, 2):
            if measure(case.nudged(NUDGE, seed=k), eps).within(tol):
                return Doubt("vanishes at a neighbouring point of the same structure")
        return Survived(
            "equal one-sided differences at the structured point (no kink along u or a dense direction) and two "
            "neighbouring points of the same structure"
        )

    return step


def _float64(
    measure64: Measure,
    case: Case,
    tol: Tolerance,
    first: Measurement,
    eps: float,
    point_out_of_range: Callable[[Case], str | None] | None,
) -> Step:
    """The float64 step of a low-precision identity: it fails in float64 on
    the same values too, or its analytic side is wrong against float64's. An
    analytic side the dtype does not hold (inf, nan or beyond its range)
    where the point's values or derivatives leave that range is out of range."""

    def run64() -> tuple[bool, Measurement]:
        m64 = measure64(case, eps)
        return not m64.within(tol), m64

    def accuracy(m64: Measurement) -> Verdict:
        # The identity holds in float64 on the same values: whether the low-
        # precision analytic side is wrong is a question of precision, judged
        # against float64's analytic side and the problem's conditioning.
        if point_out_of_range is not None and not holds(case.torch_dtype, first.analytic):
            beyond = point_out_of_range(case)
            if beyond is not None:
                return Verdict("inconclusive", f"out of range for {case.dtype}: {beyond}")
        return against_float64(
            ["the analytic side"],
            [_scalar(first.analytic)],
            lambda c: [_scalar(measure64(c, eps).analytic)],
            case,
            tol,
            ref=[_scalar(m64.analytic)],
            scales=[m64.scale],
        )

    return float64_or_accuracy(run64, accuracy)


def _stopping(stopping: Callable[[Case], Stopping | None], case: Case, tol: Tolerance, first: Measurement) -> Step:
    """The stopping step, last: a mismatch small against the derivatives'
    scale (STOPPING_TOLERANCE), where a derivative rule of the code's own
    replaces the derivative of a loop that stops on its values, is what a
    solver's stopping tolerance leaves between the function as computed
    (what finite differences see) and the exact solution (what an
    implicit-function rule differentiates): no magnitude tells it from a
    small error of the rule. A declared tolerance is the accuracy the code
    promises: judged against it, nothing is excused. Silent where it does
    not apply."""

    def step() -> Doubt | Survived:
        relative = first.error / first.scale if first.scale > 0 else math.inf
        if tol.declared or not relative <= STOPPING_TOLERANCE:
            return Survived("")
        seen = stopping(case)
        if seen is None:
            return Survived("")
        return Doubt(
            f"{seen}: its difference from finite differences, {relative:.2g} of the derivatives' scale, is within "
            "what a solver's stopping tolerance leaves (declare the accuracy the code promises with "
            "fuzzdiff.check(..., rtol=) to have it judged against that)"
        )

    return step


def _not_finite(m: Measurement) -> str:
    """Which side of a measurement makes its allowed error not finite."""
    if not math.isfinite(m.analytic):
        return "the analytic side is not finite"
    if not math.isfinite(m.noise):
        return "the reference's error estimate is not finite"
    return "the derivatives' scale is not finite"


# A point whose inputs are all within this many steps of zero gets a step of
# its own (judge's eps step): SMALL_STEP times the largest of them, and at
# most SMALL_STEP**1.5 times eps (inputs that are exact zeros have no scale).
BELOW_STEPS = 64
SMALL_STEP = 2.0**-20


def _step_below(case: Case, eps: float) -> float | None:
    """A finite-difference step below the scale of a point near zero: where
    every input is within BELOW_STEPS steps of zero, a step of eps may jump
    over all of the function's own structure there (``normalize(x)`` divides
    by ``max(|x|, 1e-12)``: quadratic terms of it have second derivatives of
    1e24 at zero, and none a step of 1e-6 away)."""
    # the arguments the function sees, not the leaves: a view's leaf holds the memory around it too
    args = [a for a in tree_leaves(case.materialize(requires_grad=False).args) if isinstance(a, torch.Tensor)]
    largest = max((max_abs(a) for a in args if a.is_floating_point() or a.is_complex()), default=0.0)
    if not largest < BELOW_STEPS * eps:
        return None
    tiny = eps * SMALL_STEP**1.5
    return min(tiny, largest * SMALL_STEP) if largest > 0 else tiny


def _grows_like_a_jump(coarse: float, mid: float, fine: float) -> bool:
    """Central differences at 8*eps, eps and eps/8 that grow like 1/eps: the
    quotient across a jump of height h is h/(2 eps), eight times larger per
    step; at a differentiable point they settle on the derivative."""
    return abs(fine) >= 4 * abs(mid) >= 16 * abs(coarse) > 0


def _scalar(x: float) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


# The whole-result comparisons' ladder (vmap, per_sample).
MISMATCH_LADDER = Ladder(("repeat", "conditioning", "float64", "lowered", "neighbours"))


def confirm_mismatch(
    identity: str,
    d: Discrepancy,
    case: Case,
    *,
    repeat: Step,
    agrees_at: Callable[[Case], bool],
    low: LowPrecision | None = None,
    lowered: Step | None = None,
    conditioning: Step | None = None,
) -> Verdict:
    """MISMATCH_LADDER for a mismatch ``d`` of two whole results at ``case``:
    it must survive ``repeat`` (fuzzdiff.confirm.steps.repeat) and persist at a
    neighbouring point (fuzzdiff.confirm.steps.neighbours, ``agrees_at(c)``: the two
    agree at case ``c``); for low precision (``low``), either persist in
    float64 too, or, where float64 agrees, the low-precision side must be
    wrong against float64 (against_float64). ``lowered``: where the code
    computes partly in lower precision, that precision's rounding may explain
    it (fuzzdiff.confirm.steps.lowered_precision). ``conditioning``: where the
    two sides compute one thing two ways, the point's conditioning may explain
    it (fuzzdiff.confirm.steps.conditioning)."""
    steps: dict[str, Step] = {"repeat": repeat, "neighbours": neighbours(case, agrees_at)}
    if conditioning is not None:
        steps["conditioning"] = conditioning
    if low is not None:
        steps["float64"] = low.step()
    if lowered is not None:
        steps["lowered"] = lowered
    return MISMATCH_LADDER.climb(identity, str(d), d.summary(), steps)


def _unsure(identity: str, why: str, m: Measurement) -> Verdict:
    return Verdict("inconclusive", f"{identity}: {why}", m.summary())


_SEVERITY = {"unsupported": 0, "pass": 1, "inconclusive": 2, "fail": 3}


def worst(*verdicts: Verdict) -> Verdict:
    """The most severe of several identities' verdicts: fail > inconclusive >
    pass > unsupported (an identity that could be tested outweighs one that could not)."""
    return max(verdicts, key=lambda v: _SEVERITY[v.kind])


def judged(identity: str, judge_fn: Callable[[], Verdict]) -> Verdict:
    """``judge_fn()``, or "unsupported" when the identity needs a missing formula,
    so that one check's other identities are still judged."""
    try:
        return judge_fn()
    except Exception as e:  # noqa: BLE001 - anything else propagates below
        reason = unsupported_reason(e)
        if reason is None:
            raise
        return Verdict("unsupported", f"{identity}: {reason}")
