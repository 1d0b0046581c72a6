"""The registry of fuzz targets: name -> Target, and a record's target built
again from what the record stores (``resolve``), whatever its kind."""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Iterable, Mapping
from typing import Any

from fuzzdiff.errors import FuzzdiffError
from fuzzdiff.targets.known import Known
from fuzzdiff.targets.recipe import ModuleFunction, references
from fuzzdiff.targets.stored_sample import StoredSample
from fuzzdiff.targets.target import FromShapes, Index, Mask, NoGrad, Only, Target, TargetUnavailable, Tol
from fuzzdiff.targets.user import UNREPLAYABLE, from_definition, per_sample_target, resolve_user_target

__all__ = [
    "Target",
    "Tol",
    "Only",
    "Index",
    "Mask",
    "NoGrad",
    "FromShapes",
    "UnknownTarget",
    "TargetUnavailable",
    "register",
    "get_target",
    "all_targets",
    "opinfo_known_by_op",
    "select",
    "resolve",
    "stored_sample_of",
    "imported_by",
]

OPINFO = "opinfo/"  # the prefix of an OpInfo target's name (fuzzdiff.targets.opinfo.tables.PREFIX)
MODULEINFO = "modules/"  # the prefix of a ModuleInfo target's name (fuzzdiff.targets.moduleinfo.tables.PREFIX)

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
    if name.startswith(OPINFO):
        # startup time and an optional dependency: torch's OpInfo database needs
        # expecttest and seconds to import
        from fuzzdiff.targets.opinfo.adapter import get_opinfo_target

        return get_opinfo_target(name)
    if name.startswith(MODULEINFO):
        # startup time and an optional dependency, as for OpInfo: torch's module_db
        from fuzzdiff.targets.moduleinfo.adapter import get_moduleinfo_target

        return get_moduleinfo_target(name)
    if ":" in name:
        return resolve_user_target(name)
    raise UnknownTarget(name)


def all_targets(include_opinfo: bool = False) -> list[Target]:
    """The catalog; with ``include_opinfo`` also every target of torch's OpInfo
    and ModuleInfo databases (slow: op_db and module_db are imported and every
    op's and module's samples drawn, about a minute)."""
    _load()
    out = sorted(_REGISTRY.values(), key=lambda t: (t.family, t.name))
    if include_opinfo:
        # startup time and an optional dependency, as in get_target
        from fuzzdiff.targets.moduleinfo.adapter import moduleinfo_targets
        from fuzzdiff.targets.opinfo.adapter import opinfo_targets

        out += opinfo_targets() + moduleinfo_targets()
    return out


def opinfo_known_by_op() -> dict[str, tuple[Known, ...]]:
    """The known discrepancies OpInfo's table declares for every sample of an
    op ("opinfo/linalg.eigh@*"), by the op's OpInfo name ("linalg.eigh"):
    code that calls the op meets them too."""
    from fuzzdiff.targets.opinfo.known import KNOWN  # the table alone: op_db is not imported

    found: dict[str, list[Known]] = {}
    for pattern, known in KNOWN:
        op = re.fullmatch(r"opinfo/([A-Za-z0-9_.]+)@\*", pattern)
        if op is not None:
            found.setdefault(op.group(1), []).append(known)
    return {name: tuple(ks) for name, ks in found.items()}


def select(patterns: Iterable[str] | None = None, families: Iterable[str] | None = None) -> list[Target]:
    """Targets whose name matches any glob pattern (all when None)."""
    pats = list(patterns or ["*"])
    fams = set(families) if families else None
    return [
        t
        for t in all_targets()
        if any(fnmatch.fnmatchcase(t.name, p) for p in pats) and (fams is None or t.family in fams)
    ]


# -- a record's target -----------------------------------------------------------------------


def resolve(
    name: str,
    definition: Mapping[str, Any] | None = None,
    stored: StoredSample | None = None,
    *,
    trust_source: bool = False,
    module_target: bool = False,
) -> Target:
    """The target a corpus record names, built again in this process: a user's
    function or module from its ``definition`` (code stored there runs only
    with ``trust_source``; ``module_target``: a module as the module target of
    one sample, fuzzdiff.targets.user.per_sample_target), an OpInfo target
    from its ``stored`` call (whatever that sample's index in this torch's
    list), any other by its name. ValueError for a bad definition,
    UnknownTarget for a name nothing has, TargetUnavailable for an OpInfo
    target this torch cannot build."""
    if definition is not None:
        target = from_definition(definition, trust_source=trust_source)
        if module_target and isinstance(target.fn, ModuleFunction):
            target = per_sample_target(target, target.fn.module)
        return target
    if stored is not None or name.startswith(OPINFO):
        # startup time and an optional dependency, as in get_target
        from fuzzdiff.targets.opinfo.adapter import get_opinfo_target

        return get_opinfo_target(name, stored)
    return get_target(name)


def stored_sample_of(name: str) -> StoredSample | None:
    """What a record of the target ``name`` stores besides its name for
    ``resolve`` to build it under another torch: an OpInfo target's call, as
    this process builds it (fuzzdiff.targets.stored_sample); None for a
    target that needs nothing more. TargetUnavailable or SampleError when it
    cannot be built or stored."""
    if not name.startswith(OPINFO):
        return None
    # startup time and an optional dependency, as in get_target
    from fuzzdiff.targets.opinfo.adapter import get_opinfo_target, stored_sample

    return stored_sample(get_opinfo_target(name))


def imported_by(name: str, definition: Mapping[str, Any] | None = None) -> list[str]:
    """The ``module:qualname`` names that ``resolve`` imports to build the
    target: none for a catalog or OpInfo target (fuzzdiff's own), nor for
    stored source (``trust_source``'s business); for a module's recipe, every
    name it refers to (fuzzdiff.targets.recipe.references)."""
    if definition is not None:
        if UNREPLAYABLE in definition:
            return []  # nothing to import: resolving it says why
        module = definition.get("module")
        if module is not None:
            return references(module)
        fn = definition.get("fn")
        return [fn] if "source" not in definition and isinstance(fn, str) else []
    return [name] if ":" in name and not name.startswith(OPINFO) else []
