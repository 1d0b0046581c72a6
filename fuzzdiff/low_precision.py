"""Low precision judged against float64 on the very same values.

Where a derivative identity holds in float64 but not in float32 (or half),
the low-precision computation itself is the question: is it wrong, or does
rounding, amplified by the problem's conditioning, explain the difference?
``against_float64`` answers it, allowing each result CONDITIONING times
what its float64 result does when the inputs move by float32 rounding, or
when every intermediate result does (``RoundingNoise``: Monte Carlo
arithmetic in float64). ``LowPrecision`` is that question put by a
whole-result comparison (fuzzdiff.confirm.confirm_mismatch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from fuzzdiff import draws
from fuzzdiff.case import Case
from fuzzdiff.compare import Discrepancy, max_abs, mismatch, worst_discrepancy
from fuzzdiff.ladder import Doubt, Step
from fuzzdiff.steps import float64_or_accuracy
from fuzzdiff.tolerance import Tolerance
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
    replay: Step | None = None,
    unstable_fails: bool = False,
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
    intermediates, not in its inputs). What is left must survive ``replay``
    (fuzzdiff.steps.replay; unless the caller has replayed) to be a "fail".

    ``unstable_fails`` is the dtype check's question (is the target as
    accurate in low precision as its inputs' conditioning allows?): a formula
    that loses digits to its own intermediates is then a finding, and
    intermediate rounding only excuses a result it leaves without a
    significant digit (a gradient that is zero by cancellation).
    """
    dtype = case.dtype
    ref = at(case) if ref is None else ref
    d = worst_discrepancy(names, low, ref, tol, scales=scales)
    if d is None:
        return Verdict("pass", f"{dtype} is within tolerance of float64")

    def explained(by: str) -> Verdict:
        return Verdict(
            "inconclusive",
            f"{dtype} vs float64 on the same values: {d}, within what rounding {by} explains (ill-conditioned)",
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
    unit = torch.finfo(case.torch_dtype).eps / 2
    for seed in range(ROUNDING_SAMPLES):
        try:
            with RoundingNoise(unit, seed=seed):
                rounded = at(case)
        except Exception as e:  # noqa: BLE001 - e.g. an index from a float moved off its integer
            return Verdict(
                "inconclusive",
                f"{dtype} vs float64 on the same values: {d}; float64 "
                f"with rounding noise raised {type(e).__name__}: its conditioning is "
                "unknown",
                d.summary(),
            )
        for k, (r, p) in enumerate(zip(ref, rounded)):
            noise = mismatch(r, p)[0]
            if not unstable_fails or max_abs(r) <= noise:
                slack[k] = max(slack[k], CONDITIONING * noise)
    far = worst_discrepancy(names, low, ref, tol, slack, scales=scales)
    if far is None:
        return explained("of intermediate results")
    doubt = replay() if replay is not None else None
    if isinstance(doubt, Doubt):
        return Verdict("inconclusive", f"{dtype} vs float64 on the same values: {far}; {doubt.why}", far.summary())
    return Verdict(
        "fail",
        f"{dtype} vs float64 on the same values: {far}; confirmed by replay and a conditioning estimate",
        far.summary(),
    )


class RoundingNoise(TorchDispatchMode):
    """Low precision's rounding, emulated in float64 (Monte Carlo arithmetic):
    every fresh floating result of an op on floating tensors is moved by
    ``unit`` (float32's unit roundoff by default), relatively, up or down at
    random. How far that moves a float64 result is its conditioning in every
    intermediate, which moving the inputs alone misses.

    Views, in-place and out= results alias their inputs and are left alone, as
    are results of ops without floating tensor arguments (``arange``,
    ``ones``; an integer cast): constants, not rounded values. Seeded, so a
    replay moves everything the same way.
    """

    def __init__(self, unit: float = torch.finfo(torch.float32).eps / 2, seed: int = 0):
        super().__init__()
        self.unit = unit
        self.seed, self.drawn = seed, 0  # a counter-based stream (fuzzdiff.draws): replays exactly

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if any(r.alias_info is not None for r in func._schema.returns):
            return out
        if not any(
            isinstance(a, torch.Tensor) and (a.is_floating_point() or a.is_complex())
            for a in tree_leaves((args, kwargs))
        ):
            return out
        return tree_map(self._round, out)

    def _round(self, t):
        if (
            not isinstance(t, torch.Tensor)
            or t.dtype not in (torch.float64, torch.complex128)
            or t.layout != torch.strided
            or not t.numel()
        ):
            return t
        z = draws.words(self.seed, t.numel(), draws.ROUNDING, start=self.drawn)
        self.drawn += t.numel()
        signs = torch.from_numpy(draws.bits(z).astype(np.float64)).reshape(t.shape)
        return t + t * (signs * (2 * self.unit) - self.unit).to(t.device)


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
        """fuzzdiff.confirm.MISMATCH_LADDER's float64 step: the mismatch persists in float64,
        or the low-precision side is wrong against float64 (against_float64)."""

        def run64() -> tuple[bool, Tensors]:
            d64, ref = self.run64(self.case)
            return d64 is not None, ref

        return float64_or_accuracy(
            run64,
            lambda ref: against_float64(self.names, self.low, lambda c: self.run64(c)[1], self.case, self.tol, ref=ref),
        )
