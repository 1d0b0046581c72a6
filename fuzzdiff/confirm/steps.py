"""The confirmation steps a ladder is built from (fuzzdiff.confirm.ladder).

Each factory returns one ``Step`` with one meaning, parameterized only by
what differs between checks: how to compute a side again, what counts as the
same, which runs stand for float64. A check declares its ladder as a mapping
from step names to these::

    LADDER.climb(identity, str(d), d.summary(), {
        "repeat": repeat(lambda: run(case), same=identical_to(first)),
        "neighbours": neighbours(case, lambda c: agree(run(c))),
    })

The finite-difference identities' own steps (an eps sweep, a steady
reference, neighbours asked through a measure) stay with them in
fuzzdiff.confirm.identities; the kink test they ask at a structured point is here.

The float64 steps have three meanings, each its own factory:

- ``float64_persists``: the two sides compute one thing two ways; the
  mismatch must persist when both run in float64 on the same values (what is
  left is rounding, and precision is the dtype check's question);
- ``float64_or_accuracy``: the identity run in float64 must fail too, or
  else the low-precision side must be wrong against its own float64 run
  beyond what conditioning explains (fuzzdiff.confirm.low_precision.against_float64);
- ``float64_margin``: both sides round (reassociated sums): the side under
  test must be MARGIN times further from a float64 run than the other side.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import torch

from fuzzdiff.case.case import Case
from fuzzdiff.confirm.compare import Discrepancy, mismatch, worst_discrepancy
from fuzzdiff.confirm.ladder import Doubt, Step, Survived, words
from fuzzdiff.confirm.rounding import RoundingNoise
from fuzzdiff.confirm.tolerance import Tolerance
from fuzzdiff.paths.result import Result
from fuzzdiff.verdict import Verdict

__all__ = [
    "identical",
    "identical_to",
    "repeat",
    "chain",
    "neighbours",
    "layout_own",
    "kink",
    "Sided",
    "conditioning",
    "float64_persists",
    "float64_or_accuracy",
    "float64_margin",
    "MARGIN",
    "NUDGE",
    "ROUNDING_NUDGE",
    "SINGULAR",
    "DENSE_COTANGENT",
]

T = TypeVar("T")
Tensors = Sequence[torch.Tensor]

NUDGE = 1e-3  # distance to a neighbouring point, as a fraction of the value range
# How far the conditioning step moves the values: a few float64 roundings of their range.
ROUNDING_NUDGE = 2.0**-40
# Low precision, where two computations of the same thing both round: the side
# under test must be this many times further from a float64 run than the side
# it is compared with, before its distance is its own error.
MARGIN = 10.0

NONDETERMINISTIC = "(nondeterministic)"
OTHER_RESULTS = "a repeat gave other results"

# A mismatch at a stride-0 input, asked of its values (Case.copied, Case.spread).
SINGULAR = "singular point (stride-0 input)"
UNTIED = "where the repeated values move independently"
CONTIGUOUS = "the same values laid out contiguously"
COPIED = "the same values passed contiguously"
LAYOUT_OWN = "it vanishes where the target gets the same values contiguously: a mismatch of the stride-0 layout"
LEAF_OWN = f"it vanishes at {CONTIGUOUS}, where the point is smooth: a mismatch of the stride-0 layout"

# The name mark of a kink test's pair seen through a dense cotangent (checks.grad.kink_pairs).
DENSE_COTANGENT = "through a dense cotangent"


# -- repeat ----------------------------------------------------------------------------------


def identical(a: Any, b: Any) -> bool:
    """Whether a repeat gave ``b`` again, bit for bit: tensors equal with NaNs
    where they were, floats equal or both NaN, sequences item by item. A
    Result that was skipped (a path that could not run) has nothing to compare."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return mismatch(a, b)[0] == 0.0
    if isinstance(a, Result) and isinstance(b, Result):
        return bool(a.skipped or b.skipped) or identical(a.tensors, b.tensors)
    if isinstance(a, numbers.Real) and isinstance(b, numbers.Real):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b))
    return bool(a == b)


def identical_to(first: Any) -> Callable[[Any], bool]:
    """``same=`` for a repeat that must give ``first`` again, bit for bit."""
    return lambda again: identical(again, first)


def repeat(
    again: Callable[[], T],
    same: Callable[[T], bool],
    *,
    why: str | Callable[[T], str] = OTHER_RESULTS,
    times: int = 1,
    label: Callable[[T], str | None] | None = None,
) -> Step:
    """The repeat step: the computation behind the mismatch, run ``times``
    more (``again()``), must give what it gave (``same``); else the finding is
    "nondeterministic", in the words ``why`` (or ``why(run)``). ``label(run)``
    may say more than "a repeat" about a repeat that survived."""

    def step() -> Doubt | Survived | None:
        for _ in range(times):
            run = again()
            if not same(run):
                return Doubt(f"{why(run) if callable(why) else why} {NONDETERMINISTIC}")
        said = label(run) if label is not None else None
        return Survived(said) if said else None

    return step


def chain(*steps: Step) -> Step:
    """Several steps as one (a repeat of each side, in order): the first
    doubt decides; else the last step that said how it survived speaks."""

    def step() -> Doubt | Survived | None:
        said = None
        for s in steps:
            result = s()
            if isinstance(result, Doubt):
                return result
            said = result if isinstance(result, Survived) else said
        return said

    return step


# -- neighbours --------------------------------------------------------------------------------


def layout_own(found: Doubt | Survived) -> Doubt | Survived:
    """The neighbours' verdict on a mismatch of the stride-0 layout, saying so when it survives."""
    return Survived(f"{found.label} ({LAYOUT_OWN})", found.errors) if isinstance(found, Survived) else found


def neighbours(case: Case, agrees: Callable[[Case], bool]) -> Step:
    """The neighbours step of a comparison of whole results (vmap, per_sample,
    compile, checkpoint, device, and dtype at a stride-0 input), which has no
    one-sided measure: doubt when the two sides agree (``agrees(c)``) at a
    neighbouring point of ``case``.

    At a stride-0 input (``Case.stride0``) the values are asked, not the
    memory: where the target agrees given the same values contiguously
    (``Case.copied``), the mismatch is the layout's own, and its neighbour
    keeps the layout; where it disagrees there too, the neighbour moves each
    repeated value on its own (``Case.spread``), off the singular point the
    layout made (repeated rows: a rank-deficient matrix)."""

    def step() -> Doubt | Survived:
        if case.stride0 and not agrees(case.copied()):
            if agrees(case.spread().nudged(NUDGE, seed=1, keep_structure=False)):
                return Doubt(f"{SINGULAR}: vanishes at a neighbouring point {UNTIED}")
            return Survived(f"{COPIED} and a neighbouring point {UNTIED}")
        found: Doubt | Survived = Survived("a neighbouring point")
        if agrees(case.nudged(NUDGE, seed=1)):
            found = Doubt("vanishes at a neighbouring point (a tie or a kink)")
        return layout_own(found) if case.stride0 else found

    return step


# Pairs of derivatives of the identity's function along its probes that agree
# wherever it is differentiable, each with its name and round-off (checks.grad.one_sided),
# made lazily: the kink test stops at the first pair that differs. The flag says the
# analytic side is finite: no pair seen through a dense cotangent is needed (kink()).
Sided = Callable[[Case, float, bool], Iterable[tuple[str, float, float, float]]]


def kink(
    sided: Sided,
    case: Case,
    eps: float,
    tol: Tolerance,
    scale: float,
    finite: bool = True,
    where: str = "the structured point",
) -> Step:
    """The kink test: a doubt when ``case`` is a kink along the probes: two of
    its derivatives that agree wherever it is differentiable (the right and the
    left one; the one along u and its sum along a split of u, for the kinks
    whose directional derivative is odd but not linear) differ beyond
    ``tol``, at ``eps`` and at ``eps / 8`` alike (a gap that shrinks with the
    step is the curvature of a smooth function); or one of them at least
    doubles from ``eps`` to ``eps / 8`` (a derivative that is infinite there:
    ``sqrt(|x|)`` at 0, or a jump seen from both sides alike).

    Pairs seen through a dense cotangent (``DENSE_COTANGENT`` in their name)
    are asked only where the analytic side is not ``finite``: a nan reaches
    every output, whatever the check's cotangent sees. ``where`` names the
    point in the doubt."""

    def step() -> Doubt | None:
        gauge = scale
        # pair by pair at both steps: a kink ends the test before the costlier pairs are made
        for (what, a, b, noise), (_, a8, b8, noise8) in zip(sided(case, eps, finite), sided(case, eps / 8, finite)):
            if not math.isfinite(gauge):  # the analytic side is not finite: the derivatives' own size
                gauge = abs(a) + abs(b)
            for x, x8 in ((a, a8), (b, b8)):
                if abs(x8) >= 2 * abs(x) and not tol.allows(abs(x8 - x), gauge, noise + noise8):
                    return Doubt(f"a singular point: {what} grow as eps shrinks ({x!r} at eps, {x8!r} at eps/8)")
            gap, gap8 = abs(a - b), abs(a8 - b8)
            if tol.allows(gap, gauge, noise) or tol.allows(gap8, gauge, noise8) or gap8 <= gap / 4:
                continue
            return Doubt(f"a kink at {where}: {what} differ ({a!r} vs {b!r}), at eps/8 too")
        return None

    return step


# -- conditioning ------------------------------------------------------------------------------


def conditioning(
    names: Sequence[str], runs: Sequence[tuple[Callable[[Case], Tensors], Tensors]], case: Case, tol: Tolerance
) -> Step:
    """Two ways of one computation at a singular point (a rank-one matrix,
    repeated eigenvalues: a stride-0 layout makes them) or through a sum of
    large terms that cancel: a rounding-sized move of the inputs, or of every
    intermediate result (RoundingNoise), moves one way's results (``run(c)``
    of each ``(run, here)``; ``here`` at ``case``) beyond the tolerance, and
    which way rounds which way is then noise, not a bug. Each repeated value
    moves on its own. (Compared with the same values in the same layout, and
    an argument passed twice still passed twice: neither a layout's own bug
    nor an aliasing bug must pass for the function's conditioning.)"""

    def step() -> Doubt | None:
        spread = case.spread() if case.stride0 else case
        for run, here in runs:
            at = run(spread) if case.stride0 else here
            for k in (1, 2):
                moved = run(spread.nudged(ROUNDING_NUDGE, seed=k, keep_structure=case.repeated))
                if worst_discrepancy(names, moved, at, tol) is not None:
                    return Doubt("the results move as far when the inputs move by rounding: ill-conditioned here")
        unit = torch.finfo(case.torch_dtype).eps / 2
        if any(_rounding_moves(names, functools.partial(run, case), here, tol, unit) for run, here in runs):
            return Doubt(
                "the results move as far when every intermediate result moves by rounding: "
                "ill-conditioned here (large terms that cancel, or a kink whose side rounding picks)"
            )
        return None

    return step


def _rounding_moves(
    names: Sequence[str], run: Callable[[], Tensors], here: Tensors, tol: Tolerance, unit: float
) -> bool:
    """Moving every intermediate result by ``unit`` (RoundingNoise, two seeds)
    moves ``run()`` from ``here`` beyond ``tol``; a run that then raises (an
    index from a float moved off its integer) gives no answer: False."""
    for seed in (1, 2):
        try:
            with RoundingNoise(unit, seed=seed, tiny=0.0):
                rounded = run()
        except Exception:  # noqa: BLE001 - no answer
            return False
        if worst_discrepancy(names, rounded, here, tol) is not None:
            return True
    return False


def rounding_explains(
    names: Sequence[str], runs: Sequence[tuple[Callable[[], Tensors], Tensors]], tol: Tolerance, unit: float
) -> Step:
    """Two ways of one computation in float64 whose results are themselves
    rounding noise: a stride-0 input's gradient through a norm of constant
    rows is a sum of terms of 1/sqrt(eps) that cancel to nothing, in float64
    as in float32. Where moving every intermediate result by ``unit``
    (RoundingNoise) moves one way's results (``run()`` of each ``(run,
    here)``) beyond the tolerance, which way rounds which way is noise."""

    def step() -> Doubt | None:
        if any(_rounding_moves(names, run, here, tol, unit) for run, here in runs):
            return Doubt(
                "in float64 too, the results move as far when every intermediate result moves by "
                "rounding: they are rounding noise here (large terms that cancel)"
            )
        return None

    return step


def lowered_precision(
    names: Sequence[str], run: Callable[[Case], Tensors], here: Tensors, case: Case, tol: Tolerance
) -> Step:
    """Two ways of one computation in float64 that the code runs partly in
    lower precision (a ``.float()`` cast, a softmax with ``dtype=torch.float32``:
    x-transformers' attention) agree only to that precision. Where moving
    those intermediate results by their own rounding (RoundingNoise's
    ``lowered_only``) moves ``run(case)`` from ``here`` beyond the tolerance,
    the mismatch is that precision's rounding. Code that stays in float64
    meets no such result: the step passes without a word."""

    def step() -> Doubt | Survived | None:
        if case.torch_dtype != torch.float64:
            return Survived("")
        for seed in (1, 2):
            mode = RoundingNoise(torch.finfo(torch.float64).eps / 2, seed=seed, tiny=0.0, lowered_only=True)
            try:
                with mode:
                    moved = run(case)
            except Exception:  # noqa: BLE001 - an index from a float moved off its integer: no answer
                return Survived("")
            if not mode.lowered:
                return Survived("")
            if worst_discrepancy(names, moved, here, tol) is not None:
                return Doubt(
                    f"the code computes in {words(sorted(mode.lowered))} inside (a cast down), and the results "
                    "move as far when those intermediate results move by their rounding"
                )
        return None

    return step


# -- float64 -----------------------------------------------------------------------------------


def float64_persists(mismatch64: Callable[[], Discrepancy | None], doubt: str) -> Step:
    """Two ways of one computation must still disagree when both run in
    float64 on the same values (``mismatch64()``, None where they agree);
    where they agree, what is left is rounding, ``doubt``."""

    def step() -> Doubt | Survived:
        d64 = mismatch64()
        if d64 is None:
            return Doubt(doubt)
        return Survived(f"float64 ({d64})", {"float64": d64.summary()})

    return step


def float64_or_accuracy(run64: Callable[[], tuple[bool, T]], accuracy: Callable[[T], Verdict]) -> Step:
    """A low-precision mismatch of an identity: ``run64()`` reruns the
    identity in float64 on the same values and says whether it fails there
    too (then the mismatch is confirmed), with that run. Where float64
    agrees, whether the low-precision side is wrong is a question of
    precision: ``accuracy(run)``, its verdict against that float64 run
    (fuzzdiff.confirm.low_precision.against_float64), must be a failure."""

    def step() -> Doubt | Survived:
        fails, run = run64()
        if fails:
            return Survived("float64 too")
        wrong = accuracy(run)
        if wrong.kind != "fail":
            return Doubt(f"float64 agrees on the same values, and {wrong.message}")
        return Survived(f"a float64 run (float64 agrees, but {wrong.message})", {"vs_float64": wrong.errors})

    return step


def float64_margin(
    names: Sequence[str],
    tested: Tensors,
    other: Tensors,
    truth: Callable[[], Tensors],
    tol: Tolerance,
    *,
    side: str,
    doubt: str,
    scale_floor: float = 0.0,
) -> Step:
    """Both sides round (compiled code and eager, a GPU and the CPU: sums
    reassociated): the side under test (``tested``, named ``side``) must be
    further from a float64 run (``truth()``) than ``other`` is, by MARGIN
    times ``other``'s distance beyond ``tol``; else ``doubt``.
    ``scale_floor`` as in fuzzdiff.confirm.compare.worst_discrepancy."""

    def step() -> Doubt | Survived:
        ref = truth()
        slack = [MARGIN * mismatch(o, r)[0] for o, r in zip(other, ref)]
        far = worst_discrepancy(names, tested, ref, tol, slack, scale_floor=scale_floor)
        if far is None:
            return Doubt(doubt)
        return Survived(f"a float64 reference ({side} vs float64: {far})", {"vs_float64": far.summary()})

    return step
