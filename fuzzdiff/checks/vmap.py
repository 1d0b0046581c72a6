"""vmap: torch.func.vmap against a Python loop over the batch.

Each example of the batch is the case reseeded (distinct values, same
structure); ``in_dims`` (0, 1, -1, None), ``out_dims``, batch sizes 1-5, the
batched inputs' layouts and one composition per example are drawn: plain
vmap, vmap of vjp / jvp / grad with per-example cotangents and tangents, vjp /
jvp of vmap, and vmap of vmap with other in_dims at each level. Both sides
make the same torch calls, so they agree to rounding; each result is judged
on its own scale. A mismatch is repeated, asked whether rounding alone moves
either side as far (a point where rounding decides: a ReLU whose input is
exactly 0, cancelling to rounding noise), and tried at a neighbouring point
before it is a failure; in low precision it must also persist in float64 on
the same values, or, where float64 agrees, the vmapped results must be wrong
against their float64 run beyond what the problem's conditioning explains
(fuzzdiff.confirm.low_precision.against_float64). Missing batching rules and code vmap
cannot batch (fuzzdiff.guards.unsupported: ``.item()``, a tensor in an if,
boolean-mask indexing, even where vmap does not say so) are "unsupported";
ops vmap runs through its slow fallback are reported (``fallbacks``), never
failed.
Targets that draw random numbers are excluded: a loop and vmap consume the
generator differently, so their outputs are not comparable element-wise.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from fuzzdiff.case.case import Case
from fuzzdiff.checks.check import Check, CiSample, Cost, OpInfoRole
from fuzzdiff.confirm.compare import result_discrepancy
from fuzzdiff.confirm.identities import confirm_mismatch
from fuzzdiff.confirm.low_precision import LowPrecision
from fuzzdiff.confirm.steps import conditioning, identical_to, repeat
from fuzzdiff.confirm.tolerance import LOW_PRECISION, tolerance
from fuzzdiff.paths import vmap as path
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict
from strategies.batching import batching
from strategies.cotangents import probes

__all__ = ["CHECK"]

_PROBES = st.fixed_dictionaries({k: probes().map(lambda p: p.__dict__.copy()) for k in ("cotangent", "direction")})


def params(target: Target, case: Case):
    return st.tuples(batching([a.shape for a in case.args]), _PROBES).map(lambda p: {**p[0], **p[1]})


def applies(target: Target) -> str | None:
    if target.random:
        return "the target draws random numbers: a loop and vmap consume the generator differently"
    return None


def run(target: Target, case: Case) -> Verdict:
    tol = tolerance(target, "vmap", case.torch_dtype)
    with path.recording_fallbacks() as ops:
        vmapped, looped = path.run(target, case)
    d = result_discrepancy(vmapped, looped, tol)
    plan = path.Plan.from_params(case.params).describe()
    if d is None:
        return Verdict("pass", f"batching fallbacks: {', '.join(ops)}" if ops else "")
    identity = f"{plan}: vmapped vs a loop over the batch"

    def run64(c: Case):
        wide, wide_looped = path.run(target, c, cast=torch.float64)
        return result_discrepancy(wide, wide_looped, tol), list(wide.tensors)

    # Low precision's rounding is emulated in float64 (RoundingNoise leaves a
    # float32 result alone), on the values the case holds.
    wide = torch.float64 if case.torch_dtype in LOW_PRECISION else None

    def both(c: Case) -> list[torch.Tensor]:
        """Both sides' results from one run: each run computes the two."""
        got, want = path.run(target, c, cast=wide)
        return [*got.tensors, *want.tensors]

    def rounding_decides():
        here = both(case) if wide is not None else [*vmapped.tensors, *looped.tensors]
        names = [f"vmapped {n}" for n in vmapped.names] + [f"looped {n}" for n in looped.names]
        return conditioning(names, [(both, here)], case, tol)()

    return confirm_mismatch(
        identity,
        d,
        case,
        repeat=repeat(lambda: path.run(target, case), same=identical_to((vmapped, looped))),
        agrees_at=lambda c: result_discrepancy(*path.run(target, c), tol) is None,
        # vmap and the loop make the same calls on other layouts (the batch is
        # stacked): at a point where rounding decides, which side rounds which way is noise
        conditioning=rounding_decides,
        low=LowPrecision(case, tol, list(vmapped.names), list(vmapped.tensors), run64)
        if case.torch_dtype in LOW_PRECISION
        else None,
    )


# Seven compositions over the whole catalog cost more than the rest of CI: the
# ci profile runs a rotating sample (tests/fuzz/sampling.py); other profiles all.
CHECK = Check(
    "vmap",
    run,
    params=params,
    applies=applies,
    aliasing="never",
    ci=CiSample(targets=40, max_examples=8),
    cost=Cost(0.039, 0.0062),
    opinfo=OpInfoRole(
        flags=("check_batched_grad", "check_batched_forward_grad"),
        tests=(
            ("TestVmapOperatorsOpInfo", "test_vmap_exhaustive"),
            ("TestOperators", "test_vmapvjp"),
            ("TestOperators", "test_vmapjvpall"),
        ),
        why="OpInfo check_batched_grad / check_batched_forward_grad is False: "
        "its gradients are not batchable with vmap",
    ),
)
