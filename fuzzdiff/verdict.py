"""The outcome of one check on one case."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Verdict", "KINDS", "FAILED", "Unsupported"]

KINDS = ("pass", "fail", "unsupported", "inconclusive", "crash", "timeout")
# "crash": the process died running the case (recorded from the in-flight
# journal, fuzzdiff.journal); "timeout": the example did not finish in time.
FAILED = frozenset({"fail", "crash", "timeout"})


class Unsupported(Exception):
    """Raised inside a check when the target cannot do what the check needs."""


@dataclass(frozen=True)
class Verdict:
    """``kind`` is one of KINDS. A "fail" is always confirmed (replayed, second
    eps, neighbouring points); what could not be confirmed is "inconclusive".
    "crash" and "timeout" are failures too: nothing is confirmed about a case
    that kills or stalls the process, it must not happen at a valid input."""

    kind: str
    message: str = ""
    errors: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"verdict kind {self.kind!r} is not one of {KINDS}")

    @property
    def failed(self) -> bool:
        return self.kind in FAILED

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}" if self.message else self.kind
