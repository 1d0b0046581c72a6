"""The tolerance policy: one default per dtype, overridable per target and check.

A tolerance bounds the *analytic* side's rounding; the reference side's own
error (finite-difference truncation and round-off) is estimated per example and
added, so no single constant has to cover both.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fuzzdiff.targets.target import Target

__all__ = ["Tolerance", "tolerance", "DEFAULTS", "LOW_PRECISION"]

# the dtypes judged against float64 on the same values (fuzzdiff.confirm.low_precision.against_float64)
LOW_PRECISION = (torch.float32, torch.complex64, torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    # the target's own, or its caller's (fuzzdiff.check rtol=/atol=): the accuracy
    # the code promises, which a mismatch is judged against, with nothing excused
    # as the code's design (fuzzdiff.confirm.identities' stopping step)
    declared: bool = False

    def allowed(self, scale: float, noise: float = 0.0) -> float:
        """The largest error allowed at ``scale``, with the reference's own error ``noise``."""
        return self.atol + self.rtol * scale + 4.0 * noise

    def allows(self, error: float, scale: float, noise: float = 0.0) -> bool:
        return error <= self.allowed(scale, noise)


DEFAULTS = {
    torch.float64: Tolerance(1e-10, 1e-7),
    torch.complex128: Tolerance(1e-10, 1e-7),
    torch.float32: Tolerance(1e-5, 2e-4),
    torch.complex64: Tolerance(1e-5, 2e-4),
    torch.bfloat16: Tolerance(1e-2, 4e-2),
    torch.float16: Tolerance(1e-3, 1e-2),
}


def tolerance(target: Target, check: str, dtype: torch.dtype) -> Tolerance:
    """The target's override for ``check`` (scaled for low precision) or the default."""
    base = DEFAULTS[dtype]
    override = target.tolerances.get(check)
    if override is None:
        return base
    return Tolerance(max(base.atol, override.atol), max(base.rtol, override.rtol), declared=True)
