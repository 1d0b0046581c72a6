"""Dtypes a target declares support for."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

__all__ = ["dtypes", "DIFFERENTIABLE_DTYPES"]

DIFFERENTIABLE_DTYPES = (torch.float64, torch.float32, torch.complex128, torch.complex64, torch.bfloat16, torch.float16)


def dtypes(allowed: Sequence[torch.dtype] = (torch.float64, torch.float32)) -> st.SearchStrategy[torch.dtype]:
    """One of ``allowed``, shrinking toward the first (float64 by default)."""
    allowed = tuple(allowed)
    if not allowed:
        raise InvalidArgument("allowed must name at least one dtype")
    bad = [d for d in allowed if d not in DIFFERENTIABLE_DTYPES]
    if bad:
        raise InvalidArgument(f"{bad} are not differentiable dtypes; choose from {DIFFERENTIABLE_DTYPES}")
    return st.sampled_from(allowed)
