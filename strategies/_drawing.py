"""Strategies drawn many times per example, made cheap to draw."""

import functools
import inspect
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

__all__ = ["eager", "planned", "COIN", "integers", "FIND"]

T = TypeVar("T")
P = ParamSpec("P")
Plan = TypeVar("Plan")


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


def planned(
    plan: Callable[P, Plan],
) -> Callable[[Callable[[Plan], SearchStrategy[T]]], Callable[P, SearchStrategy[T]]]:
    """Make ``build`` the strategy function ``build(plan(...))``, taking ``plan``'s arguments.

    A strategy's arguments are validated and resolved once, by its plan
    function; a composite that draws it with its own ``draw`` starts from the
    plan (``values_plan`` and ``draw_values``). So the keyword signature is
    written once, on the plan function: the strategy function shows it
    (``help``, ``inspect.signature``) under its own name and docstring, and a
    call that does not fit it is a TypeError naming the strategy function.
    """
    signature = inspect.signature(plan)

    def decorate(build: Callable[[Plan], SearchStrategy[T]]) -> Callable[P, SearchStrategy[T]]:
        def strategy(*args: P.args, **kwargs: P.kwargs) -> SearchStrategy[T]:
            try:
                signature.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"{build.__name__}(): {e}") from None
            return build(plan(*args, **kwargs))

        functools.update_wrapper(strategy, build)  # name, docstring, module and globals for type hints
        returns = inspect.signature(build).return_annotation
        strategy.__signature__ = signature.replace(return_annotation=returns)  # type: ignore[attr-defined]
        strategy.__annotations__ = {**plan.__annotations__, "return": returns}
        return strategy

    return decorate


COIN = eager(st.booleans())


@functools.lru_cache(maxsize=1024)
def integers(min_value: int, max_value: int) -> SearchStrategy[int]:
    """``st.integers(min_value, max_value)``, built once per range."""
    return eager(st.integers(min_value, max_value))


# ``hypothesis.find`` as fuzzdiff asks it for an example of its own (a sample
# input to probe a function at): the same example every time, generated only,
# no database, no output.
FIND = settings(
    database=None,
    derandomize=True,
    max_examples=200,
    deadline=None,
    phases=(Phase.generate,),
    suppress_health_check=list(HealthCheck),
    verbosity=Verbosity.quiet,
)
