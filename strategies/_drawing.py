"""Strategies drawn many times per example, made cheap to draw."""

import functools
from typing import TypeVar

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

__all__ = ["eager", "COIN", "integers"]

T = TypeVar("T")


def eager(strategy: SearchStrategy[T]) -> SearchStrategy[T]:
    """The strategy that ``strategy`` lazily stands for, built now.

    Hypothesis's public constructors (``st.integers``, ``st.booleans``,
    ``st.lists``, ...) return lazy wrappers. Every draw from a wrapper first
    looks up what it wraps (a thread-local weak cache, cleared after each
    draw), which on a small draw costs as much as the draw itself. Composites
    that draw the same strategy on every example keep the built one instead:
    the same label, the same choices, the same shrinking, at about half the
    cost. A strategy that is not a lazy wrapper is returned as it is.
    """
    if not isinstance(strategy, SearchStrategy):
        raise TypeError(f"expected a Hypothesis strategy, got {type(strategy).__name__}")
    return getattr(strategy, "wrapped_strategy", strategy)


COIN = eager(st.booleans())


@functools.lru_cache(maxsize=1024)
def integers(min_value: int, max_value: int) -> SearchStrategy[int]:
    """``st.integers(min_value, max_value)``, built once per range."""
    return eager(st.integers(min_value, max_value))
