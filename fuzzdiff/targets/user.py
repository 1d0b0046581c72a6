"""Targets named ``module:qualname``: user code, imported on demand."""

from __future__ import annotations

import importlib
import os
import sys

from fuzzdiff.targets.target import Target

__all__ = ["resolve_user_target", "import_object"]


def import_object(ref: str):
    """Import ``package.module:attr.sub``; errors say which part was not found.

    The current directory is importable, as under ``python -m``: the console
    script would otherwise not find the user's own module.
    """
    module_name, sep, qualname = ref.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"expected MODULE:ATTR, got {ref!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    try:
        obj = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"cannot import module {module_name!r} (from {ref!r}): {e}") from None
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"module {module_name!r} has no attribute {qualname!r}") from None
    return obj


def resolve_user_target(ref: str) -> Target:
    obj = import_object(ref)
    if isinstance(obj, Target):
        return obj
    raise ValueError(f"{ref!r} is a {type(obj).__name__}, not a fuzzdiff Target; "
                     "wrap it with fuzzdiff.Target(name, fn, spec) to say its shapes")
