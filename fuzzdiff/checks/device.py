"""device: the same case on CUDA and on CPU gives the same outputs and gradients.

The case's values are drawn on the CPU and moved (Case.device), so both sides
see the very same bits; gradients use the case's random cotangent. CUDA
kernels reassociate sums, so a float32 difference alone proves nothing: a
mismatch must repeat, and it is a failure only when the CUDA side is further
from a float64 CPU run on the same values than the CPU side is, by a margin,
and persists at a neighbouring point (at a kink such as relu's, cuDNN and the
CPU may take different one-sided derivatives); otherwise it is inconclusive.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from fuzzdiff.case.case import Case
from fuzzdiff.checks.check import Check, probe_params
from fuzzdiff.confirm.compare import max_abs, worst_discrepancy
from fuzzdiff.confirm.ladder import Ladder, Step
from fuzzdiff.confirm.steps import float64_margin, identical_to, neighbours, repeat
from fuzzdiff.confirm.tolerance import tolerance
from fuzzdiff.paths.eager import evaluate
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict

__all__ = ["CHECK", "evaluate_on", "compare_devices", "LADDER"]

# the device side against the CPU's: repeated, judged against a float64 CPU
# run (MARGIN: the device must be that much further from it than the CPU is),
# and tried at a neighbouring point
LADDER = Ladder(("repeat", "float64", "neighbours"))

Run = Callable[..., tuple[list[str], list[torch.Tensor]]]


def evaluate_on(target: Target, case: Case, device: str, cast: torch.dtype | None = None):
    """Outputs and gradients of ``case`` materialized on ``device``, brought back
    to the CPU: names and tensors (a fuzzdiff.paths.result.Result)."""
    names, tensors = evaluate(target, replace(case, device=device), cast=cast)
    return names, [t.detach().cpu() for t in tensors]


def compare_devices(target: Target, case: Case, device: str = "cuda", *, run: Run = evaluate_on) -> Verdict:
    """``device`` against the CPU on ``case``; ``run(target, case, device, cast)``
    is the path (a parameter so that the judging can be tested without a GPU)."""
    tol = tolerance(target, "device", case.torch_dtype)
    names, here = run(target, case, "cpu")
    _, there = run(target, case, device)
    floor = max((max_abs(t) for t in here), default=0.0)
    d = worst_discrepancy(names, there, here, tol, scale_floor=floor)
    if d is None:
        return Verdict("pass")

    def agrees(c: Case) -> bool:
        # CPU and cuDNN may pick different one-sided derivatives at a kink (relu'(0))
        on_device, on_cpu = run(target, c, device)[1], run(target, c, "cpu")[1]
        return worst_discrepancy(names, on_device, on_cpu, tol, scale_floor=floor) is None

    steps: dict[str, Step] = {
        "repeat": repeat(
            lambda: run(target, case, device)[1], same=identical_to(there), why=f"a {device} repeat gave other results"
        ),
        "float64": float64_margin(
            names,
            there,
            here,
            lambda: run(target, case, "cpu", torch.float64)[1],
            tol,
            side=device,
            doubt=f"{device} is no further from a float64 CPU run than cpu is (rounding, e.g. reassociated sums)",
            scale_floor=floor,
        ),
        "neighbours": neighbours(case, agrees),
    }
    return LADDER.climb(f"{device} vs cpu", f"on the same values: {d}", d.summary(), steps)


def run(target: Target, case: Case) -> Verdict:
    return compare_devices(target, case, "cuda")


def applies(target: Target) -> str | None:
    if "cuda" not in target.devices:
        return f"the target is fuzzed on the CPU only: {target.cpu_only}"
    return None if torch.cuda.is_available() else "no CUDA device"


CHECK = Check("device", run, params=probe_params("cotangent"), applies=applies, needs_grad=False)
