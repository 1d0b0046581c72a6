"""Confirming a discrepancy before it is called a failure.

Every derivative identity is measured as two numbers that should agree (say
``<J^T v, u>`` and a finite-difference ``<v, J u>``). A first disagreement is
only a suspicion: it becomes a failure once it survives a replay, other
eps (and a reference steady under tiny changes of eps: no rounding noise),
two neighbouring points (a kink or a tie vanishes there) and, for low
precision, a float64 run on the same values with a conditioning estimate.
Anything that does not survive is "inconclusive" — never a failure.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

from fuzzdiff.case import Case
from fuzzdiff.tolerance import Tolerance
from fuzzdiff.unsupported import unsupported_reason
from fuzzdiff.verdict import Verdict

__all__ = ["Measurement", "judge", "judged", "worst", "confirm_mismatch", "EPS", "NUDGE"]

EPS = 1e-6          # finite-difference step in float64, along a direction of norm ~1 per element
NUDGE = 1e-3        # distance to a neighbouring point, as a fraction of the value range
F32_NUDGE = 2.0**-22  # input perturbation at float32 rounding level, for conditioning
JITTER = (1e-3, -1e-3)  # relative changes of eps that expose rounding noise in a reference


class Measurement(NamedTuple):
    """Two sides of one identity, with the scale and the reference's own error.
    (A named tuple: one is made per example and per confirmation step.)"""

    analytic: float
    reference: float
    scale: float
    noise: float = 0.0

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
        return {"analytic": self.analytic, "reference": self.reference, "abs_error": self.error,
                "scale": self.scale, "reference_noise": self.noise}


Measure = Callable[[Case, float], Measurement]


def judge(identity: str, measure: Measure, case: Case, tol: Tolerance, *,
          measure64: Measure | None = None, eps: float = EPS) -> Verdict:
    """Pass, or confirm the discrepancy of ``measure`` at ``case`` step by step.

    ``measure64`` is the same identity with the analytic side computed in
    float64 on the case's exact values; it is given for low-precision cases.
    """
    first = measure(case, eps)
    error, allowed = first.error, tol.allowed(first.scale, first.noise)
    if error <= allowed:
        # The error rides along so that hypothesis.target() can steer toward it.
        return Verdict("pass", "", {"abs_error": error, "scale": first.scale, "allowed": allowed})
    if not math.isfinite(first.reference):
        return _unsure(identity, "the reference is not finite here", first)

    again = measure(case, eps)
    if not _same(again.analytic, first.analytic):
        return _unsure(identity, f"replay gave {again.analytic!r}, first run {first.analytic!r} "
                       "(nondeterministic)", first)
    for other_eps in (eps / 8, eps * 8):
        m = measure(case, other_eps)
        if m.within(tol):
            return _unsure(identity, f"agrees at eps={other_eps:g}: finite differences are unreliable here", first)
    # Rounding noise no step size removes (a function computed with
    # cancellation): steps JITTER apart leave the truncation error alone but
    # move the points far past the rounding pattern, so the reference moves
    # by its own noise. Counted as the reference's error, may it explain all?
    spread = max(abs(measure(case, eps * (1 + j)).reference - first.reference) for j in JITTER)
    if first._replace(noise=first.noise + spread).within(tol):
        return _unsure(identity, f"the reference moves by {spread:.3g} when eps changes by "
                       f"{JITTER[0]:.1%}: it is rounding noise here", first)
    for k in (1, 2):
        m = measure(case.nudged(NUDGE, seed=k), eps)
        if m.within(tol):
            return _unsure(identity, "vanishes at a neighbouring point (a kink or a tie)", first)

    if measure64 is not None and measure64(case, eps).within(tol):
        # The identity holds in float64 at the same values: what is left is
        # rounding, amplified by conditioning that input nudges cannot always
        # see (e.g. a saturated tanh before a normalization). Precision is the
        # dtype check's question, judged there against float64.
        return _unsure(identity, "float64 agrees on the same values: only low precision disagrees "
                       "(see the dtype check)", first)
    allowed = tol.allowed(first.scale, first.noise)
    bound = (f"allowed {allowed:.3g}" if math.isfinite(allowed) else
             "no tolerance applies: the reference's scale is not finite")
    return Verdict("fail", f"{identity}: analytic {first.analytic!r} vs reference {first.reference!r} "
                   f"(abs error {first.error:.3g}, {bound}); "
                   "confirmed by replay, eps/8, 8*eps, a steady reference under eps*(1 +- "
                   f"{JITTER[0]:g}) and two neighbouring points",
                   first.summary())


def confirm_mismatch(identity: str, d, *, replays: Callable[[], bool],
                     agrees64: Callable[[], bool] | None,
                     agrees_nearby: Callable[[], bool]) -> Verdict:
    """The confirmation every whole-result check shares, for a mismatch ``d``
    (a compare.Discrepancy): it must replay, persist in float64 (``agrees64``
    is given for low precision) and at a neighbouring point."""
    if not replays():
        return Verdict("inconclusive", f"{identity}: {d}; a replay gave other results "
                       "(nondeterministic)", d.summary())
    if agrees64 is not None and agrees64():
        return Verdict("inconclusive", f"{identity}: {d}; float64 agrees (low-precision rounding)",
                       d.summary())
    if agrees_nearby():
        return Verdict("inconclusive", f"{identity}: {d}; vanishes at a neighbouring point "
                       "(a tie or a kink)", d.summary())
    return Verdict("fail", f"{identity}: {d}; confirmed by replay"
                   + (", float64" if agrees64 is not None else "") + " and a neighbouring point",
                   d.summary())


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


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
