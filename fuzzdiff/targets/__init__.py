"""The registry of fuzz targets: name -> Target."""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Iterable

from fuzzdiff.errors import FuzzdiffError
from fuzzdiff.targets.target import FromShapes, Index, Mask, NoGrad, Only, Target, Tol
from fuzzdiff.targets.user import resolve_user_target

__all__ = [
    "Target",
    "Tol",
    "Only",
    "Index",
    "Mask",
    "NoGrad",
    "FromShapes",
    "UnknownTarget",
    "register",
    "get_target",
    "all_targets",
    "select",
]

_REGISTRY: dict[str, Target] = {}
_LOADED = False


class UnknownTarget(FuzzdiffError, KeyError):
    def __init__(self, name: str):
        close = difflib.get_close_matches(name, list(_REGISTRY), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        super().__init__(f"unknown target {name!r}{hint}")

    def __str__(self):
        return self.args[0]


def register(*targets: Target) -> None:
    for t in targets:
        if t.name in _REGISTRY and _REGISTRY[t.name] is not t:
            raise ValueError(f"target {t.name!r} registered twice")
        _REGISTRY[t.name] = t


def _load() -> None:
    global _LOADED
    if not _LOADED:
        _LOADED = True
        # startup time: the catalog (tensorly, hundreds of targets) is built on first
        # use; it registers itself through this module, so it cannot be imported above
        from fuzzdiff.targets import catalog  # noqa: F401


def get_target(name: str) -> Target:
    _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        pass
    if name.startswith("opinfo/"):
        # startup time and an optional dependency: torch's OpInfo database needs
        # expecttest and seconds to import
        from fuzzdiff.targets.opinfo.adapter import get_opinfo_target

        return get_opinfo_target(name)
    if ":" in name:
        return resolve_user_target(name)
    raise UnknownTarget(name)


def all_targets(include_opinfo: bool = False) -> list[Target]:
    """The catalog; with ``include_opinfo`` also every OpInfo target (slow: op_db
    is imported and every op's samples drawn, about a minute)."""
    _load()
    out = sorted(_REGISTRY.values(), key=lambda t: (t.family, t.name))
    if include_opinfo:
        # startup time and an optional dependency, as in get_target
        from fuzzdiff.targets.opinfo.adapter import opinfo_targets

        out += opinfo_targets()
    return out


def select(patterns: Iterable[str] | None = None, families: Iterable[str] | None = None) -> list[Target]:
    """Targets whose name matches any glob pattern (all when None)."""
    pats = list(patterns or ["*"])
    fams = set(families) if families else None
    return [
        t
        for t in all_targets()
        if any(fnmatch.fnmatchcase(t.name, p) for p in pats) and (fams is None or t.family in fams)
    ]
