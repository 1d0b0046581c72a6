"""Which OpInfos yield targets, and which checks apply to one: the OpInfo's
own flags and skips, and fuzzdiff's tables (fuzzdiff.targets.opinfo.tables).

An OpInfo author who skips a test, or expects it to fail, already knows the op
fails (or cannot run) there: the check that stands for that test
(``TESTS``) is skipped with the test's name as the reason.
"""

from __future__ import annotations

import unittest
from collections.abc import Iterable

import torch

from fuzzdiff.targets.opinfo.tables import (
    DTYPE_SKIP,
    EXCLUDED,
    MAX_FLOAT32,
    TESTS,
    TIED,
    TIES,
    VMAP_SKIP,
    listed,
    match,
    op_key,
)

__all__ = ["excluded", "skips_for", "float32_skip"]


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
    """Check name -> why it does not apply, from the OpInfo's flags and skips
    (and our own tables)."""
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
    flags = {
        "forward": (op.supports_forward_ad, "OpInfo supports_forward_ad=False"),
        "forward2": (
            op.supports_forward_ad and op.supports_fwgrad_bwgrad,
            "OpInfo supports_forward_ad or supports_fwgrad_bwgrad is False",
        ),
        "vmap": (
            op.check_batched_grad and (op.check_batched_forward_grad or not op.supports_forward_ad),
            "OpInfo check_batched_grad / check_batched_forward_grad is False: "
            "its gradients are not batchable with vmap",
        ),
        "gradgrad": (op.supports_gradgrad, "OpInfo supports_gradgrad=False"),
    }
    for check, (ok, why) in flags.items():
        if not ok:
            skip.setdefault(check, why)
    for check, tests in TESTS.items():
        hit = _skipped_test(op, tests)
        if hit and check not in skip:
            skip[check] = f"OpInfo skips or expects failure of {hit} (float64, cpu)"
    if near:
        skip["alias"] = (
            "values are pinned near the sample (each argument is sample + x): aliasing of x never reaches the op"
        )
        skip["mutation"] = (
            "values are pinned near the sample (each argument is sample + x): the op gets a fresh "
            "tensor, so a write to it never reaches x"
        )
    return skip


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
