"""Inputs outside the user's function's domain: those where it raises in
plain eager use. ``fuzzdiff.check`` reports such an input once, as an
``input-domain`` failure, and rejects such inputs from then on, by every check."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import reject
from torch.utils._pytree import tree_leaves

from fuzzdiff.case import Case
from fuzzdiff.outcome import FuzzFailure
from fuzzdiff.root_cause import message_pattern
from fuzzdiff.targets.target import Target

__all__ = ["DOMAIN", "domain_error", "rejecting"]

DOMAIN = "input-domain"  # Failure.check of an input where the function itself raises


def domain_error(target: Target, failure: FuzzFailure) -> tuple[tuple[str, str], str] | None:
    """Whether ``failure`` is the function raising at its input in plain eager
    use: in its call, or in its backward (an empty batch its backward cannot
    take), whatever check came upon it. Then the rule that rejects such
    errors from then on, and the finding's message; None for any other
    failure (an error only under a transform is that check's finding)."""
    if not isinstance(failure.verdict.errors.get("exception"), str):
        return None
    found = _eager_error(target, failure.case)
    if found is None:
        return None
    error, where = found
    kind = type(error).__name__
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    message = (
        f"the function raises {kind} at this input, {where}: {first[:300]} "
        f"(invalid=({kind},) declares such inputs outside its domain)"
    )
    return (kind, message_pattern(first)), message


def _eager_error(target: Target, case: Case) -> tuple[Exception, str] | None:
    """What the target raises at ``case`` in plain eager use, and where: its
    call without autograd, else its call and backward (a cotangent of ones)."""
    try:
        args = case.materialize(requires_grad=False).args
        with torch.no_grad():
            target(*args, **case.kwargs)
    except Exception as e:  # noqa: BLE001 - any exception of the user's function
        return e, "in its plain call"
    try:
        inputs = case.materialize()
        outs = [t for t in tree_leaves(target(*inputs.args, **case.kwargs)) if _differentiable(t)]
        if outs and inputs.leaves:
            torch.autograd.grad(outs, inputs.leaves, [torch.ones_like(o) for o in outs], allow_unused=True)
    except Exception as e:  # noqa: BLE001
        return e, "in its backward"
    return None


def _differentiable(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())


def rejecting(fn: Callable[..., Any], outside: tuple[type[BaseException], ...]) -> Callable[..., Any]:
    """``fn``, with its exceptions of the types in ``outside`` turned into a
    rejected example (Hypothesis draws another), not a failure."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except outside:
            reject()

    return call
