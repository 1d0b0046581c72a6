"""Which OpInfos yield targets, and which checks apply to one: the OpInfo's
own flags and skips, read against each check's role (fuzzdiff.targets.role),
and fuzzdiff's tables about ops (fuzzdiff.targets.opinfo.tables).

An OpInfo author who skips a test, or expects it to fail, already knows the op
fails (or cannot run) there: the check whose role names that test is skipped
with the test's name as the reason.
"""

from __future__ import annotations

import unittest
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from fuzzdiff.targets.opinfo.tables import (
    DTYPE_SKIP,
    EXCLUDED,
    MAX_FLOAT32,
    OUTSIDE,
    REFINES,
    TIED,
    TIES,
    VMAP_SKIP,
    listed,
    match,
    op_key,
)
from fuzzdiff.targets.role import OpInfoRole

__all__ = ["excluded", "skips_for", "declined", "Declines", "float32_skip"]


def excluded(op) -> str | None:
    """Why an op yields no targets (None: it does)."""
    if not op.supports_autograd:
        return "supports_autograd=False"
    if torch.float64 not in op.supported_backward_dtypes("cpu"):
        return "no float64 backward on CPU"
    # (gradcheck_nondet_tol is about CUDA's atomic adds; a CPU run that differs is inconclusive)
    if getattr(op, "has_nondeterministic_output", False):  # torch >= 2.12
        return "nondeterministic output (has_nondeterministic_output)"
    return match(op_key(op), EXCLUDED)


def skips_for(op, near: bool, complex_out: bool = False) -> dict[str, str]:
    """Check name -> why it does not apply, from fuzzdiff's tables about ops;
    the OpInfo's own flags and skips are the checks' roles' business (``declined``)."""
    skip = {}
    if listed(op_key(op), TIES):
        skip["grad"] = skip["forward"] = skip["gradgrad"] = TIED
    if complex_out:
        skip["vmap"] = "complex outputs: the vmap check's vjp compositions need real outputs (fuzzdiff.paths.vmap)"
    vmap_skip = match(op_key(op), VMAP_SKIP)
    if vmap_skip:
        skip["vmap"] = vmap_skip
    dtype_skip = match(op_key(op), DTYPE_SKIP)
    if dtype_skip:
        skip["dtype"] = dtype_skip
    if near:
        skip["alias"] = (
            "values are pinned near the sample (each argument is sample + x): aliasing of x never reaches the op"
        )
        skip["mutation"] = (
            "values are pinned near the sample (each argument is sample + x): the op gets a fresh "
            "tensor, so a write to it never reaches x"
        )
    return skip


def declined(op, role: OpInfoRole | None) -> str | None:
    """Why a check with OpInfo role ``role`` does not apply to ``op``: it has no
    role, one of its flags is False on the op, or the op skips or expects to
    fail one of its tests (on float64, on the CPU). None: it applies."""
    if role is None:
        return OUTSIDE
    if not all(_flag(op, flag) for flag in role.flags):
        return role.unflagged
    hit = _skipped_test(op, role.tests)
    return None if hit is None else f"OpInfo skips or expects failure of {hit} (float64, cpu)"


@dataclass(frozen=True, eq=False)
class Declines:
    """An OpInfo target's ``Target.decline``: its op read against a check's
    role (``declined``), but for the checks whose OpInfo skip is the op's
    contract (``contracts``, fuzzdiff.targets.opinfo.tables.CONTRACTS): they
    run, with the refused cases rejected."""

    op: Any
    contracts: tuple[str, ...] = ()

    def __call__(self, check: str, role: OpInfoRole | None) -> str | None:
        if role is not None and check in self.contracts:
            return None
        return declined(self.op, role)


def _flag(op, name: str) -> bool:
    """The op's flag ``name``; one that refines another counts only where that one is set."""
    refined = REFINES.get(name)
    return bool(getattr(op, name)) or (refined is not None and not getattr(op, refined))


def float32_skip(op, near: bool, intervals: Iterable[tuple[float, float]]) -> str | None:
    """Why a target has no float32 cases (so no ``dtype`` check); None: it has."""
    if near:
        return "values are pinned near a structured sample (NEAR): float64 only"
    if torch.float32 not in op.supported_backward_dtypes("cpu"):
        return "float32 is not among the OpInfo's supported_backward_dtypes on CPU"
    # OpInfo samples hold values up to 1e6 on purpose (logsumexp), where float32
    # rounding of the inputs alone moves the results.
    if not all(max(abs(lo), abs(hi)) <= MAX_FLOAT32 for lo, hi in intervals):
        return f"sample values beyond {MAX_FLOAT32:g}: float32 rounding of the inputs alone moves the results"
    return None


def _is_skip(decorator) -> bool:
    """unittest.skip(...) and unittest.expectedFailure; not tolerance overrides or
    decorators that skip elsewhere (skipIfRocm)."""
    return decorator is unittest.expectedFailure or getattr(decorator, "__qualname__", "").startswith("skip.")


def _skipped_test(op, tests) -> str | None:
    for d in op.decorators:
        if not hasattr(d, "is_active") or not any(_is_skip(x) for x in d.decorators):
            continue
        for cls, test in tests:
            if d.is_active(cls, test, "cpu", torch.float64, {}):
                return f"{cls}.{test}"
    return None
