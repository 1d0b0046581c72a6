"""per_sample: ExpandedWeights' per-sample gradients against a loop and vmap.

``call_for_per_sample_grads(module)`` (ExpandedWeight) on a batch of 1 to 8
samples, with ``loss_reduction`` "sum" or "mean", inputs that do or do not
require grad and a drawn memory layout of the batch, against (1) a Python loop
taking one gradient per sample and (2) ``vmap(grad(loss))`` with
``functional_call``; the outputs, every parameter's ``grad_sample`` and the
inputs' gradients are compared (fuzzdiff.paths.expanded). Applies to module
targets (fuzzdiff.targets.catalog.modules). ExpandedWeights' own errors for an
unsupported configuration are "unsupported" (fuzzdiff.guards.unsupported); so is the
vmap reference where vmap cannot run the module (nn.RNN has no batching rule).
A mismatch is repeated and tried at a neighbouring point before it is a
failure; in low precision it must also persist in float64 on the same values,
or, where float64 agrees, the disagreeing path must be wrong against its own
float64 run beyond what conditioning explains (fuzzdiff.confirm.low_precision.against_float64).

Tolerances: the three paths compute the same sums in different orders
(ExpandedWeights forms per-sample weight gradients with einsum over unfolded
inputs or grouped convolutions, the loop each op's own backward, RNNs through
a decomposition), so they agree to rounding, accumulated over at most a few
dozen terms here (tiny modules). The dtype defaults hold with no override:
float64 atol 1e-10 + rtol 1e-7, float32 atol 1e-5 + rtol 2e-4, relative to
the largest |value| of each compared tensor (a per-sample gradient that is
small for one sample is judged on the batch's scale). Measured over 40
float32 cases each of conv2d, conv3d, conv_block, LSTM, GRU, layer, group and
instance norm: worst error 4.1e-7 of that scale, 500 times below rtol.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from hypothesis import strategies as st

from fuzzdiff.case.case import Case
from fuzzdiff.checks.check import Check, CiSample, Cost
from fuzzdiff.confirm.compare import Discrepancy, result_discrepancy
from fuzzdiff.confirm.identities import confirm_mismatch
from fuzzdiff.confirm.low_precision import LowPrecision
from fuzzdiff.confirm.steps import identical_to, lowered_precision, repeat
from fuzzdiff.confirm.tolerance import LOW_PRECISION, Tolerance, tolerance
from fuzzdiff.paths import expanded as path
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict
from strategies.batching import BATCHED_LAYOUT_FEATURES
from strategies.cotangents import probes
from strategies.layouts import layouts

__all__ = ["CHECK", "MAX_BATCH"]

MAX_BATCH = 8
_BATCH = st.integers(1, MAX_BATCH)
_REDUCTION = st.sampled_from(path.REDUCTIONS)
_FLAG = st.booleans()


@st.composite
def _params(draw, shapes: tuple[tuple[int, ...], ...]) -> dict:
    batch = draw(_BATCH)
    params = {
        "batch": batch,
        "loss_reduction": draw(_REDUCTION),
        "input_grad": draw(_FLAG),
        "infer_batch": draw(_FLAG),
        "layouts": [],
    }
    for shape in shapes:
        lay = draw(layouts((batch, *shape), features=BATCHED_LAYOUT_FEATURES))
        params["layouts"].append(
            None
            if lay.is_contiguous((batch, *shape))
            else {"storage_size": lay.storage_size, "strides": list(lay.strides), "offset": lay.offset}
        )
    params["cotangent"] = draw(probes()).__dict__.copy()
    return params


def params(target: Target, case: Case):
    return _params(tuple(tuple(a.shape) for a in case.args))


def applies(target: Target) -> str | None:
    if target.module is None:
        return "not an nn.Module target: per-sample gradients are of a module's parameters"
    return None


EXPANDED, VMAPPED = "ExpandedWeights vs a loop", "vmap(grad(functional_call)) vs a loop"


def _discrepancy(sides: path.Sides, tol: Tolerance) -> tuple[str, Discrepancy] | None:
    """(which path, its worst mismatch) against the loop; ExpandedWeights first."""
    d = result_discrepancy(sides.expanded, sides.looped, tol)
    if d is not None:
        return EXPANDED, d
    if not sides.vmapped.skipped:
        d = result_discrepancy(sides.vmapped, sides.looped, tol)
        if d is not None:
            return VMAPPED, d
    return None


@contextmanager
def one_thread():
    """Run with one intra-op thread: tiny modules gain nothing from more, and on
    a loaded 2-core machine (CI runs two xdist workers) OpenMP hand-offs made a
    3x3 conv1d take 4 ms instead of 40 us."""
    n = torch.get_num_threads()
    if n != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if n != 1:
            torch.set_num_threads(n)


def run(target: Target, case: Case) -> Verdict:
    with one_thread():
        return _run(target, case)


def _run(target: Target, case: Case) -> Verdict:
    tol = tolerance(target, "per_sample", case.torch_dtype)
    plan = path.Plan.from_params(case.params).describe()
    try:
        first = path.run(target, case)
    except path.NoBatchDim as e:
        return Verdict("unsupported", str(e))
    found = _discrepancy(first, tol)
    if found is None:
        skipped = first.vmapped.skipped
        return Verdict("pass", f"vmap reference skipped: {skipped}" if skipped else "")
    which, d = found
    identity = f"{plan}: {which}"
    side = "expanded" if which == EXPANDED else "vmapped"

    def run64(c: Case):
        wide = path.run(target, c, cast=torch.float64)
        d64 = _discrepancy(wide, tol)
        return (None if d64 is None else d64[1]), list(getattr(wide, side).tensors)

    return confirm_mismatch(
        identity,
        d,
        case,
        repeat=repeat(lambda: path.run(target, case), same=identical_to(first)),
        agrees_at=lambda c: _discrepancy(path.run(target, c), tol) is None,
        low=LowPrecision(case, tol, list(first.looped.names), list(getattr(first, side).tensors), run64)
        if case.torch_dtype in LOW_PRECISION
        else None,
        lowered=lowered_precision(
            list(first.looped.names),
            lambda c: list(getattr(path.run(target, c), side).tensors),
            list(getattr(first, side).tensors),
            case,
            tol,
        ),
    )


CHECK = Check(
    "per_sample",
    run,
    params=params,
    applies=applies,
    aliasing="never",
    needs_grad=False,
    ci=CiSample(targets=8, max_examples=8),
    cost=Cost(0.21, 0.010),
)
