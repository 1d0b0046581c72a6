"""Scripts for the checks whose script needs the script generator itself.

Most checks state their script beside their identity (``Check.script``,
fuzzdiff.fragment). The vmap, per_sample and compile checks embed data only
this layer can write (batched examples, modules, compiled-run settings): their
fragments register here, by check name, from their own modules in this package.
"""

from __future__ import annotations

from collections.abc import Callable

from fuzzdiff.fragment import Fragment

__all__ = ["Fragment", "FRAGMENTS", "register"]


FRAGMENTS: dict[str, Callable] = {}


def register(name: str) -> Callable:
    def deco(fn: Callable) -> Callable:
        FRAGMENTS[name] = fn
        return fn

    return deco
