"""The dtypes a function's plain call refuses, asked once before the checks.

A function that computes with tensors of its own in one dtype (a module cast
with ``.double()``, a float64 constant) raises at every draw of another
dtype: ``mat1 and mat2 must have the same dtype``. Left to the checks, those
draws cost half the budget in rejections and read as an input-domain failure
of the user's code. Asked here at the same inputs in each dtype: a dtype
whose call raises at every input where another dtype's call runs is left
out, and the report says so, with the error.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from fuzzdiff.case.case import Case
from fuzzdiff.search.random_calls import cases_in
from fuzzdiff.targets.target import Target

__all__ = ["refused_dtypes"]


def refused_dtypes(target: Target, calling: Callable[[Case], None] | None = None) -> dict[torch.dtype, str]:
    """Each of ``target``'s dtypes that its plain call refuses, with the error
    it raises; empty where every dtype runs, where none does (the checks
    report that, at their own inputs), or where it has only one.
    ``calling(case)`` is told each case before the call (a journal)."""
    if len(target.dtypes) < 2:
        return {}
    refused: dict[torch.dtype, str] = {dtype: "" for dtype in target.dtypes}
    compared = False
    for case in cases_in(target):
        errors = {dtype: _raised(target, case.with_dtype(dtype), calling) for dtype in target.dtypes}
        if all(error is not None for error in errors.values()):
            continue  # outside the function's domain in every dtype: says nothing of dtypes
        compared = True
        for dtype, error in errors.items():
            if error is None:
                refused.pop(dtype, None)
            elif dtype in refused:
                refused[dtype] = refused[dtype] or error
    return refused if compared else {}


def _raised(target: Target, case: Case, calling: Callable[[Case], None] | None) -> str | None:
    """The error the plain call raises at ``case``, as the checks call it
    (leaves that require grad), in words; None where it runs."""
    if calling is not None:
        calling(case)
    args = case.materialize(requires_grad=True).args
    try:
        target(*args, **case.kwargs)
    except Exception as error:  # noqa: BLE001 - any error of the user's function is an answer here
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}".rstrip(": ")
    return None
