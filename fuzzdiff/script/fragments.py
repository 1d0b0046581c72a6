"""Scripts for the checks whose script needs the script generator itself.

Most checks state their script beside their identity (``Check.script``,
fuzzdiff.checks.fragment). The vmap, per_sample and compile checks embed data only
this layer can write (batched examples, modules, compiled-run settings): their
fragments register here, by check name, from their own modules in this package.

A check that compiles the function under test (compile) registers with
``kwargs_in_closure``: its script holds the function's keyword arguments in a
closure, as fuzzdiff.paths.compiled does, where dynamo traces a number as
symbolic (a SymInt, a SymFloat); a literal in the code is a constant to it.
"""

from __future__ import annotations

from collections.abc import Callable

from fuzzdiff.checks.fragment import Fragment

__all__ = ["Fragment", "FRAGMENTS", "KWARGS_IN_CLOSURE", "register"]


FRAGMENTS: dict[str, Callable] = {}
KWARGS_IN_CLOSURE: set[str] = set()  # checks whose scripts pass the keyword arguments through a closure


def register(name: str, *, kwargs_in_closure: bool = False) -> Callable:
    def deco(fn: Callable) -> Callable:
        FRAGMENTS[name] = fn
        if kwargs_in_closure:
            KWARGS_IN_CLOSURE.add(name)
        return fn

    return deco
