"""What a target's arguments are, beyond a shape: index tensors, masks,
floats read but not differentiated, and keyword arguments drawn from the
shapes. Plain data below the targets, so that strategies can read it without
knowing what a target is."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Index", "Mask", "NoGrad", "ArgKind", "FromShapes"]


@dataclass(frozen=True)
class Index:
    """An int64 argument whose values index into the dim named ``dim`` (0 .. size-1)."""

    dim: str


@dataclass(frozen=True)
class Mask:
    """A boolean argument."""


@dataclass(frozen=True)
class NoGrad:
    """A floating argument that is read but not differentiated (a loss target)."""


ArgKind = Index | Mask | NoGrad


@dataclass(frozen=True)
class FromShapes:
    """A keyword argument drawn from a strategy that depends on the drawn shapes.

    ``fn(shapes)`` gets ``{arg name: shape}`` and returns a Hypothesis strategy,
    e.g. a valid ``dim`` for the rank that was drawn.
    """

    fn: Callable[[Mapping[str, tuple[int, ...]]], Any]
