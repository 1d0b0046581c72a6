"""Known PyTorch discrepancies of OpInfo targets: (target, check, reason, evidence).

An entry keeps CI green where torch itself is wrong: the fuzz test of that
(target, check) becomes an xfail when, and only when, it fails. Every entry
was verified by hand to be torch's discrepancy, not the adapter's, and its
evidence is a standalone torch snippet or the exact error.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

__all__ = ["Known", "KNOWN", "known_for"]


@dataclass(frozen=True)
class Known:
    target: str     # glob over target refs, e.g. "opinfo/nn.functional.conv2d@*"
    check: str
    reason: str
    evidence: str

    def __post_init__(self):
        if not (self.reason.strip() and self.evidence.strip()):
            raise ValueError(f"known entry {self.target} x {self.check} needs a reason and evidence")


KNOWN: tuple[Known, ...] = ()


def known_for(ref: str) -> dict[str, str]:
    """Check name -> "reason. Evidence: ..." for the target ``ref``."""
    return {k.check: f"{k.reason}. Evidence: {k.evidence}" for k in KNOWN
            if fnmatch.fnmatchcase(ref, k.target)}
