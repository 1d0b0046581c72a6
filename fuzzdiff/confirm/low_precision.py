"""Low precision judged against float64 on the very same values.

Where a derivative identity holds in float64 but not in float32 (or half),
the low-precision computation itself is the question: is it wrong, or does
rounding, amplified by the problem's conditioning, explain the difference?
``against_float64`` answers it, allowing each result CONDITIONING times
what its float64 result does when the inputs move by float32 rounding, or
when every intermediate result does (``RoundingNoise``: Monte Carlo
arithmetic in float64). ``LowPrecision`` is that question put by a
whole-result comparison (fuzzdiff.confirm.identities.confirm_mismatch).

A function that reads its dtype's own eps or smallest normal value
(``torch.finfo(x.dtype).eps`` as a guard) is another function in each dtype
(fuzzdiff.confirm.dtype_constants): a value that guard decides (SI-SDR of a
perfect estimate, 10 log10(s / eps)) has no float64 reference, and is not
judged.

A value whose float64 result lies beyond the dtype's finite range is out of
range, not wrong: the dtype can only overflow there (fuzzdiff.confirm.compare.beyond_range),
and that value is not judged. Nor, where the point leaves the dtype's range (an
output or a derivative along the probes beyond it), is a derivative that is
not finite in the dtype: an infinity met on the way makes it inf * 0 or
inf - inf. Only values that are not finite are excused so: a finite wrong
value, or a nan where every value the point has fits, is judged as ever.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from fuzzdiff.case.case import Case
from fuzzdiff.confirm.compare import Discrepancy, beyond_range, max_abs, mismatch, out_of_range, worst_discrepancy
from fuzzdiff.confirm.dtype_constants import LowDtypeConstants
from fuzzdiff.confirm.ladder import Doubt, Step, words
from fuzzdiff.confirm.rounding import ConditionedOpNoise, RoundingNoise
from fuzzdiff.confirm.steps import float64_or_accuracy
from fuzzdiff.confirm.tolerance import Tolerance
from fuzzdiff.verdict import Verdict

__all__ = ["against_float64", "RoundingNoise", "LowPrecision", "F32_NUDGE", "CONDITIONING", "Tensors"]

F32_NUDGE = 2.0**-22  # input perturbation at float32 rounding level, for conditioning
ROUNDING_SAMPLES = 3  # runs under RoundingNoise: one can cancel out by chance
CONDITIONING = 100.0  # low precision may be off by this many times float64's move under rounding

Tensors = Sequence[torch.Tensor]


def against_float64(
    names: Sequence[str],
    low: Tensors,
    at: Callable[[Case], Tensors],
    case: Case,
    tol: Tolerance,
    *,
    ref: Tensors | None = None,
    scales: Sequence[float] | None = None,
    repeat: Step | None = None,
    unstable_fails: bool = False,
    own_rules_only: bool = False,
    outputs: int | None = None,
    point_out_of_range: Callable[[], str | None] | None = None,
) -> Verdict:
    """Low-precision results ``low`` against the same computation in float64 on
    the very same values: ``at(case)`` (or ``ref``, already computed). Each
    tensor is judged on its own float64 magnitude (or ``scales``).

    Within ``tol``: "pass". Beyond it, rounding amplified by conditioning may
    explain the difference ("inconclusive"): each tensor is allowed
    CONDITIONING times what its float64 result does when every input moves by
    float32 rounding (``at`` at a nudged case), or when every intermediate
    result moves by the dtype's rounding (``at`` under RoundingNoise: a
    saturated tanh before a normalization is ill-conditioned in its
    intermediates, not in its inputs). What is left must survive ``repeat``
    (fuzzdiff.confirm.steps.repeat; unless the caller has repeated it) to be a "fail".

    ``unstable_fails`` is the dtype check's question (is the target as
    accurate in low precision as its inputs' conditioning allows?): a formula
    that loses digits to its own intermediates is then a finding, unless it
    is a value rounding leaves without a significant digit (a value below the
    ulp of the sum it cancels out of), or a derivative at a stride-0 input,
    whose leaf sums its repeated elements'. With ``own_rules_only`` (a user's
    code) the question is put to the code's own derivative rules alone (an
    ``autograd.Function``'s backward, a custom op's registered autograd):
    digits that rounding of torch's ops loses (terms that cancel in a
    composition: an attention's normalizer within 1e-4 of its numerator) are
    the dtype's noise, and "inconclusive" says how many. A rule is the
    finding where rounding explains the difference only with the rule's own
    intermediates rounded, not with the rule computed exactly and everything
    else rounded (a derivative taken as a difference of squares).
    Nor are the digits a solve or a factorization (CONDITIONED_OPS) loses to
    its own conditioning at the inputs the code gave it (_conditioned_ops).

    Values the dtype cannot hold are not judged (``_unheld``): a float64
    result beyond its range, and where the first ``outputs`` tensors are the
    function's values and the rest its derivatives, a derivative that is not
    finite where an output overflowed or ``point_out_of_range()`` says the
    point's derivatives leave the range (fuzzdiff.checks.grad). Nor are the
    values that the dtype's own eps or smallest normal value decides, where
    the function reads them (``_decided_by_constants``). Nothing else wrong:
    "inconclusive", saying which.
    """
    dtype = case.dtype
    ref = at(case) if ref is None else ref
    d = worst_discrepancy(names, low, ref, tol, scales=scales)
    if d is None:
        return Verdict("pass", f"{dtype} is within tolerance of float64")
    excused = _unheld(names, low, ref, case.torch_dtype, outputs, point_out_of_range)
    if excused is not None:
        keep, why = excused
        low, ref = _kept(low, keep), _kept(ref, keep)
        inside = worst_discrepancy(names, low, ref, tol, scales=scales)
        if inside is None:
            return Verdict("inconclusive", f"{dtype} vs float64 on the same values: {why}", d.summary())
        d, at = inside, _within(at, keep)
    decided = _decided_by_constants(names, ref, at, case, tol, scales)
    if decided is not None:
        keep, why = decided
        low, ref = _kept(low, keep), _kept(ref, keep)
        inside = worst_discrepancy(names, low, ref, tol, scales=scales)
        if inside is None:
            return Verdict("inconclusive", f"{dtype} vs float64 on the same values: {why}", d.summary())
        d, at = inside, _within(at, keep)

    def explained(by: str, why: str = "ill-conditioned") -> Verdict:
        return Verdict(
            "inconclusive",
            f"{dtype} vs float64 on the same values: {d}, within what rounding {by} explains ({why})",
            d.summary(),
        )

    def conditioned(ops: str) -> Verdict:
        return Verdict(
            "inconclusive",
            f"{dtype} vs float64 on the same values: {d}, within what the own conditioning of {ops} "
            f"explains at the inputs the code gave it (no {dtype} kernel does better)",
            d.summary(),
        )

    def unknown(e: BaseException) -> Verdict:
        return Verdict(
            "inconclusive",
            f"{dtype} vs float64 on the same values: {d}; float64 with rounding noise raised {type(e).__name__}: "
            "its conditioning is unknown",
            d.summary(),
        )

    # At a stride-0 input the inputs' rounding moves each repeated value on its
    # own (Case.spread): the repetition is the drawn layout's, not the values'
    # own, and a singular point it made is ill-conditioned in exactly that way.
    around = case.spread().nudged(F32_NUDGE, seed=5, keep_structure=False) if case.stride0 else None
    moved = at(case.nudged(F32_NUDGE, seed=5) if around is None else around)
    slack = [CONDITIONING * mismatch(r, m)[0] for r, m in zip(ref, moved)]
    if worst_discrepancy(names, low, ref, tol, slack, scales=scales) is None:
        return explained("of the inputs")
    info = torch.finfo(case.torch_dtype)
    # The gradient of a stride-0 input's leaf sums its repeated elements'
    # gradients: a cancellation of the layout's making, not the formula's, so
    # intermediate rounding excuses it even where the code's own rule loses digits.
    laid_sums = case.stride0 and outputs is not None
    # Below its smallest normal value the dtype rounds absolutely: rounding like any other,
    # except to a formula held to its digits, whose intermediate that underflows loses them.
    tiny = 0.0 if unstable_fails and not own_rules_only else info.tiny
    everywhere = _rounding_slack(at, case, ref, slack, tiny)
    if isinstance(everywhere, BaseException):
        return unknown(everywhere)
    unstable = ""  # where the code's own rule is what loses the digits: that rule, in words
    if worst_discrepancy(names, low, ref, tol, everywhere.allowed, scales=scales) is None:
        if not unstable_fails or (own_rules_only and not everywhere.rules):
            ops = _conditioned_ops(names, low, ref, at, case, tol, slack, scales) if unstable_fails else None
            return conditioned(ops) if ops else explained("of intermediate results", _digits_lost(d, info.eps))
        # The code's own derivative rule, computed exactly while everything else is rounded:
        # is the difference still explained? If not, the rule's own formula loses the digits.
        if own_rules_only:
            elsewhere = _rounding_slack(at, case, ref, slack, tiny, spare_rules=True)
            if isinstance(elsewhere, BaseException):
                return unknown(elsewhere)
            rules = words(sorted(everywhere.rules))
            if worst_discrepancy(names, low, ref, tol, elsewhere.allowed, scales=scales) is None:
                return explained(f"of intermediate results outside {rules}", _digits_lost(d, info.eps))
            unstable = (
                f"; rounding inside {rules} explains it and rounding elsewhere does not: "
                "the rule's own formula loses the digits"
            )
    if unstable_fails:
        # The rule's own finding, but for a value rounding leaves no digit of, or a stride-0 leaf's sum.
        for k, r in enumerate(ref):
            noise = everywhere.noise[k]
            if max_abs(r) <= noise or (laid_sums and k >= (outputs or 0)):
                slack[k] = max(slack[k], CONDITIONING * noise)
        lost = everywhere.lost
    else:
        slack, lost = everywhere.allowed, [None] * len(ref)
    far = worst_discrepancy(names, low, ref, tol, slack, scales=scales)
    if far is None:
        return explained("of intermediate results")
    if any(m is not None and bool(m.any()) for m in lost):
        # A value whose every digit rounding takes (a softmax's backward, s_i (g_i - <s, g>), at
        # g of 1000 and an entry of 1e-5: float32's ulp of the sum is 6e-5) is one no formula
        # of the dtype holds, however many digits the rest of its tensor keeps.
        inside = worst_discrepancy(names, _kept(low, lost), _kept(ref, lost), tol, slack, scales=scales)
        if inside is None:
            return Verdict(
                "inconclusive",
                f"{dtype} vs float64 on the same values: {d}, and rounding of intermediate results leaves "
                f"{_lost_words(names, lost, far)} without a significant digit (terms that cancel)",
                d.summary(),
            )
        far = inside
    if unstable_fails:
        ops = _conditioned_ops(names, low, ref, at, case, tol, slack, scales)
        if ops is not None:
            return conditioned(ops)
    doubt = repeat() if repeat is not None else None
    if isinstance(doubt, Doubt):
        return Verdict("inconclusive", f"{dtype} vs float64 on the same values: {far}; {doubt.why}", far.summary())
    return Verdict(
        "fail",
        f"{dtype} vs float64 on the same values: {far}; confirmed by a repeat and a conditioning estimate{unstable}",
        far.summary(),
    )


@dataclass(frozen=True)
class _Rounded:
    """What rounding every intermediate result does to each float64 result:
    ``noise``, its largest move over the samples; ``allowed``, the slack that
    grants (CONDITIONING times that, or the inputs' own where larger);
    ``lost``, the values it leaves without a significant digit; ``rules``,
    the code's own derivative rules met (fuzzdiff.confirm.rounding.own_rule)."""

    noise: list[float]
    allowed: list[float]
    lost: list[torch.Tensor | None]
    rules: frozenset[str]


def _rounding_slack(
    at: Callable[[Case], Tensors],
    case: Case,
    ref: Tensors,
    slack: Sequence[float],
    tiny: float,
    spare_rules: bool = False,
) -> _Rounded | BaseException:
    """``at(case)`` under RoundingNoise, ROUNDING_SAMPLES times, against its
    float64 result ``ref``; the exception where a rounded run raised (an index
    from a float moved off its integer): then nothing is known."""
    info = torch.finfo(case.torch_dtype)
    noise: list[float] = [0.0] * len(ref)
    lost: list[torch.Tensor | None] = [None] * len(ref)
    rules: set[str] = set()
    for seed in range(ROUNDING_SAMPLES):
        mode = RoundingNoise(info.eps / 2, seed=seed, tiny=tiny, spare_rules=spare_rules)
        try:
            with mode:
                rounded = at(case)
        except Exception as e:  # noqa: BLE001
            return e
        rules |= mode.rules
        for k, (r, p) in enumerate(zip(ref, rounded)):
            noise[k] = max(noise[k], mismatch(r, p)[0])
            lost[k] = _digitless(r, p, lost[k])
    allowed = [max(s, CONDITIONING * n) for s, n in zip(slack, noise)]
    return _Rounded(noise, allowed, lost, frozenset(rules))


def _digits_lost(d: Discrepancy, eps: float) -> str:
    """How many digits the worst difference says the computation loses, in words."""
    digits = math.log10(max(d.abs_error / max(d.scale, 1e-300) / eps, 1.0))
    return f"it loses about {digits:.1f} digits to its own rounding: the dtype's noise, not a wrong derivative"


def _conditioned_ops(
    names: Sequence[str],
    low: Tensors,
    ref: Tensors,
    at: Callable[[Case], Tensors],
    case: Case,
    tol: Tolerance,
    slack: list[float],
    scales: Sequence[float] | None = None,
) -> str | None:
    """The ops whose own conditioning explains the difference, named (None:
    theirs does not, or the code runs none of CONDITIONED_OPS).

    The dtype check calls digits a formula loses to its own intermediates a
    finding, but not those a solve or a factorization loses at a near-singular
    matrix the code handed it: no kernel does better in the dtype, and the
    op's input, not its formula, is what the code chose. So only those ops'
    inputs are moved (ConditionedOpNoise), and each result may differ by
    CONDITIONING times what that moves it."""
    info = torch.finfo(case.torch_dtype)
    allowed, met = list(slack), set()
    for seed in range(ROUNDING_SAMPLES):
        mode = ConditionedOpNoise(info.eps / 2, seed=seed)
        try:
            with mode:
                moved = at(case)
        except Exception:  # noqa: BLE001 - moved off a valid input (a factorization that fails): no excuse
            return None
        if not mode.met:
            return None
        met |= mode.met
        for k, (r, m) in enumerate(zip(ref, moved)):
            allowed[k] = max(allowed[k], CONDITIONING * mismatch(r, m)[0])
    if worst_discrepancy(names, low, ref, tol, allowed, scales=scales) is not None:
        return None
    return words(sorted(met))


def _decided_by_constants(
    names: Sequence[str],
    ref: Tensors,
    at: Callable[[Case], Tensors],
    case: Case,
    tol: Tolerance,
    scales: Sequence[float] | None = None,
) -> tuple[list[torch.Tensor | None], str] | None:
    """The values of ``ref`` that the case's dtype's own constants decide, a
    mask per tensor, and why, in words; None where there are none.

    A function that reads ``torch.finfo(x.dtype).eps`` is another function in
    each dtype (fuzzdiff.confirm.dtype_constants). Where float64 with the
    dtype's constants in place of its own (LowDtypeConstants) moves a value
    beyond the tolerance, the guard decides it: float64 is no reference for
    it, and it is not judged. Values the guard leaves alone are judged as ever."""
    mode = LowDtypeConstants(case.torch_dtype)
    try:
        with mode:
            theirs = at(case)
    except Exception:  # noqa: BLE001 - the function cannot take the dtype's constants: nothing is known
        return None
    if not mode.met:
        return None
    masks: list[torch.Tensor | None] = []
    for k, (r, t) in enumerate(zip(ref, theirs)):
        if r.shape != t.shape or not (r.is_floating_point() or r.is_complex()):
            masks.append(None)
            continue
        r, t = r.detach(), t.detach().to(r.device, r.dtype)
        scale = max(max_abs(r), scales[k] if scales else 0.0)
        same = (r == t) | (torch.isnan(r) & torch.isnan(t))
        masks.append(~same & ~((r - t).abs() <= tol.atol + tol.rtol * scale))
    which = [k for k, m in enumerate(masks) if m is not None and bool(m.any())]
    if not which:
        return None
    first, mask = which[0], masks[which[0]]
    assert mask is not None
    flat = int(mask.reshape(-1).to(torch.uint8).argmax())
    high, low = (float(t[first].detach().reshape(-1)[flat].real) for t in (ref, theirs))
    return masks, (
        f"the function reads its dtype's own {mode.named(case.torch_dtype)}, and that decides "
        f"{words([names[k] for k in which])} here ({_where(names[first], mask)}: {high:.3g} with float64's, "
        f"{low:.3g} with {case.dtype}'s): another function in each dtype, not judged"
    )


def _digitless(ref: torch.Tensor, rounded: torch.Tensor, before: torch.Tensor | None) -> torch.Tensor | None:
    """Where rounding every intermediate result moves ``ref`` by as much as
    its own size (``before``: where an earlier sample did), a mask; None
    where the two do not compare element by element. An exact zero that
    rounding leaves alone is a structural zero, and keeps its digit."""
    if ref.shape != rounded.shape or not (ref.is_floating_point() or ref.is_complex()):
        return before
    r, p = ref.detach(), rounded.detach().to(ref.device, ref.dtype)
    moved = (r - p).abs()
    mask = (moved > 0) & (moved >= r.abs())
    return mask if before is None else before | mask


def _lost_words(names: Sequence[str], lost: Sequence[torch.Tensor | None], worst: Discrepancy) -> str:
    """Which values rounding leaves without a digit, in words: the worst
    mismatch's own where it is one of them, else the first."""
    k = names.index(worst.what) if worst.what in names else -1
    mask = lost[k] if k >= 0 else None
    if mask is not None and worst.index and mask.dim() == len(worst.index) and bool(mask[worst.index]):
        return f"{worst.what} at {list(worst.index)}"
    k = next(k for k, m in enumerate(lost) if m is not None and bool(m.any()))
    mask = lost[k]
    assert mask is not None
    return _where(names[k], mask)


def _unheld(
    names: Sequence[str],
    low: Tensors,
    ref: Tensors,
    dtype: torch.dtype,
    outputs: int | None = None,
    point_out_of_range: Callable[[], str | None] | None = None,
) -> tuple[list[torch.Tensor | None], str] | None:
    """The values of ``low`` that ``dtype`` cannot be judged on, a mask per
    tensor, and why, in words; None where there are none.

    A value whose float64 result ``ref`` lies beyond the dtype's range, and
    whose low-precision one shows the overflow: not finite, or saturated (in
    the dtype's top binade, with the right sign). Where the first ``outputs``
    tensors are the function's values and the rest its derivatives: the
    derivatives' values that are not finite though their float64 results are,
    once an output overflowed or the point leaves the range elsewhere
    (``point_out_of_range()``, asked only then): inf * 0 or inf - inf, wherever the
    infinity went."""
    masks = [_overflowed(l, r, dtype) for l, r in zip(low, ref)]
    why = next((_beyond(n, r, m, dtype) for n, r, m in zip(names, ref, masks) if m is not None and bool(m.any())), None)
    if outputs is not None:
        lost: dict[int, torch.Tensor] = {}  # derivatives' values not finite where their float64 results are
        for k in range(outputs, len(masks)):
            m = masks[k]
            if m is not None:
                n = ~torch.isfinite(low[k].detach()).to(m.device) & torch.isfinite(ref[k].detach())
                if bool(n.any()):
                    lost[k] = n
        point = None
        if lost and any(m is not None and bool(m.any()) for m in masks[:outputs]):
            point = why  # an output overflowed
        elif lost and point_out_of_range is not None:
            point = point_out_of_range()
        if point is not None:
            for k, n in lost.items():
                m = masks[k]
                masks[k] = n if m is None else n | m
            if why is None:
                k, n = next(iter(lost.items()))
                why = f"{_first(names[k], low[k], n)} where {point} (inf * 0)"
    if why is None:
        return None
    return masks, f"out of range for {str(dtype).removeprefix('torch.')}: {why}"


def _beyond(name: str, ref: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype) -> str | None:
    """The first value of ``ref`` that ``mask`` marks, beyond ``dtype``'s range, in words."""
    return out_of_range(
        [name], [torch.where(mask, ref.detach(), torch.zeros((), dtype=ref.dtype, device=ref.device))], dtype
    )


def _first(name: str, t: torch.Tensor, mask: torch.Tensor) -> str:
    """The first value of ``t`` that ``mask`` marks, in words: "grad 0 at [1, 0] is nan"."""
    value = t.detach().reshape(-1)[int(mask.reshape(-1).to(torch.uint8).argmax())]
    return f"{_where(name, mask)} is {float(value.abs() if value.is_complex() else value)!r}"


def _where(name: str, mask: torch.Tensor) -> str:
    """Where the first value ``mask`` marks is, in words: "grad 0 at [1, 0]"."""
    flat = int(mask.reshape(-1).to(torch.uint8).argmax())
    index = [int(i) for i in torch.unravel_index(torch.tensor(flat), mask.shape)] if mask.dim() else []
    return f"{name} at {index}" if index else name


def _within(at: Callable[[Case], Tensors], keep: Sequence[torch.Tensor | None]) -> Callable[[Case], Tensors]:
    """``at`` with the values ``keep`` masks set to zero, wherever it is asked."""
    return lambda c: _kept(at(c), keep)


def _overflowed(low: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
    """Where ``ref`` is beyond ``dtype``'s range and ``low`` shows it (None:
    the two are not comparable element by element)."""
    if low.shape != ref.shape or not (ref.is_floating_point() or ref.is_complex()):
        return None
    r = ref.detach()
    l = low.detach().to(r.device)
    shown = ~torch.isfinite(l)
    if not l.is_complex():
        shown |= (l.abs() >= torch.finfo(dtype).max / 2) & (torch.sign(l.to(r.dtype)) == torch.sign(r))
    return beyond_range(r, dtype) & shown


def _kept(tensors: Tensors, keep: Sequence[torch.Tensor | None]) -> list[torch.Tensor]:
    """``tensors`` with the values ``keep`` masks set to zero: what is left is
    compared, scaled and moved as ever."""
    return [
        t
        if m is None or m.shape != t.shape
        else torch.where(m.to(t.device), torch.zeros((), dtype=t.dtype, device=t.device), t)
        for t, m in zip(tensors, keep)
    ] + list(tensors[len(keep) :])


@dataclass(frozen=True)
class LowPrecision:
    """A low-precision mismatch's float64 question, for confirm_mismatch:
    ``run64(c)`` reruns the identity in float64 on case ``c``'s very same values
    and returns its mismatch there (None: it holds) and the float64 results to
    set against ``low``, the low-precision side that disagreed (``names``)."""

    case: Case
    tol: Tolerance
    names: Sequence[str]
    low: Tensors
    run64: Callable[[Case], tuple[Discrepancy | None, Tensors]]

    def step(self) -> Step:
        """fuzzdiff.confirm.identities.MISMATCH_LADDER's float64 step: the mismatch persists in float64,
        or the low-precision side is wrong against float64 (against_float64)."""

        def run64() -> tuple[bool, Tensors]:
            d64, ref = self.run64(self.case)
            return d64 is not None, ref

        return float64_or_accuracy(
            run64,
            lambda ref: against_float64(self.names, self.low, lambda c: self.run64(c)[1], self.case, self.tol, ref=ref),
        )
