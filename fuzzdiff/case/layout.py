"""Where a case's tensor argument lives: a layout over a storage, or another argument's storage.

A ``Layout`` is the recipe ``storage.as_strided(shape, strides, offset)``; an
``Alias`` says that an argument shares the memory of an earlier one. Both are
plain data, checked here so that a bad layout is a ``CaseError`` naming it
wherever it comes from (a strategy, a record, a user).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fuzzdiff.errors import FuzzdiffError

__all__ = ["CaseError", "Layout", "Alias"]


class CaseError(FuzzdiffError, ValueError):
    """A case (or the JSON it came from) that cannot describe real tensors."""


@dataclass(frozen=True)
class Layout:
    """Where a tensor's elements live: ``storage.as_strided(shape, strides, offset)``.

    The same recipe a bug report would use, so replay and standalone scripts
    rebuild exactly the memory layout that was fuzzed.
    """

    storage_size: int
    strides: tuple[int, ...]
    offset: int = 0

    @staticmethod
    def contiguous(shape: Sequence[int]) -> Layout:
        strides, acc = [], 1
        for s in reversed(shape):
            strides.append(acc)
            acc *= max(s, 1)
        return Layout(math.prod(shape), tuple(reversed(strides)), 0)

    def check(self, shape: Sequence[int], where: str = "layout") -> None:
        if len(self.strides) != len(shape):
            raise CaseError(f"{where}: {len(self.strides)} strides for a rank-{len(shape)} shape")
        if self.offset < 0 or any(s < 0 for s in self.strides):
            raise CaseError(f"{where}: negative offset or stride")
        if math.prod(shape) == 0:
            return
        last = self.offset + sum((n - 1) * s for n, s in zip(shape, self.strides))
        if last >= self.storage_size:
            raise CaseError(f"{where}: element {last} lies past storage_size {self.storage_size}")

    def is_contiguous(self, shape: Sequence[int]) -> bool:
        c = Layout.contiguous(shape)
        return self.offset == 0 and all(n <= 1 or s == cs for n, s, cs in zip(shape, self.strides, c.strides))

    def writable_view(self, storage: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        """The view with stride-0 dims narrowed to one element, so a copy never overlaps."""
        sizes = [min(n, 1) if st == 0 else n for n, st in zip(shape, self.strides)]
        return storage.as_strided(sizes, self.strides, self.offset)


@dataclass(frozen=True)
class Alias:
    """This argument shares memory with argument ``of``.

    "same": it *is* that tensor object. "view": it is another view, by its own
    layout, of that argument's storage (overlapping or disjoint).
    """

    of: int
    kind: str  # "same" | "view"
