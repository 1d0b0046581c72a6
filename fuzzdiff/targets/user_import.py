"""A user's code by reference, ``module:qualname``: importing it, and whether a
corpus record may import it at all, told without running any of it.

A record names the function it was found on; rebuilding it imports that
module, which runs its code. ``plan_import`` says beforehand where that code
lives, and refuses (``ImportRefused``) what is not the project's own unless
the caller allows the module by name (fuzzdiff.corpus.repro's policy).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import inspect
import keyword
import os
import pkgutil
import site
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from fuzzdiff.errors import FuzzdiffError

__all__ = ["import_object", "ImportRefused", "PlannedImport", "plan_import", "is_module_name", "is_installed"]


def _cwd_importable() -> None:
    """The current directory is importable, as under ``python -m``: the console
    script would otherwise not find the user's own module."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())


def import_object(ref: str):
    """Import ``package.module:attr.sub``; errors say which part was not found.
    The current directory is importable (``_cwd_importable``)."""
    module_name, sep, qualname = ref.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"expected MODULE:ATTR, got {ref!r}")
    _cwd_importable()
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


# -- which modules a corpus record may have imported --------------------------------------


class ImportRefused(FuzzdiffError, ValueError):
    """A record names a module that is not the project's code and that nobody allowed."""


@dataclass(frozen=True)
class PlannedImport:
    """What rebuilding the target ``ref`` imports: ``module``, whose code is in
    ``origin`` (None where it cannot be told without importing), and why that
    is allowed (``reason``)."""

    ref: str
    module: str
    origin: str | None
    reason: str

    def __str__(self) -> str:
        where = f" (from {self.origin})" if self.origin else ""
        return f"importing {self.module}{where} to rebuild target {self.ref}"


def plan_import(ref: str, allow: Iterable[str] = (), root: Path | str | None = None) -> PlannedImport:
    """Where importing the module of ``ref`` (``module:qualname``) would run
    code from, found without running any of it; ImportRefused unless that
    code is the project's or ``allow`` names the module.

    The project's code: every file the import runs (the module, and the
    ``__init__`` of each package above it) lies under ``root`` (default: the
    working directory) and outside the standard library and site-packages,
    so that a virtual environment inside the project is not the project.
    ``allow``: module names to import wherever they are; each also allows its
    submodules (``mypkg`` allows ``mypkg.ops``) and the ``__init__`` of the
    packages it is in, which importing it runs.

    Nothing is imported here. ``importlib.util.find_spec("a.b")`` would import
    ``a``; so only the top-level name is looked up on sys.path (the current
    directory included, as for the import itself), and each submodule in its
    parent's folders, as the import would, unless the parent is already imported.
    """
    module, sep, qualname = ref.partition(":")
    if not sep or not qualname or not is_module_name(module):
        raise ValueError(f"expected MODULE:ATTR, got {ref!r}")
    chain = _specs(module)
    last = chain[-1] if chain is not None else None
    found = last is not None
    origin = last.origin if last is not None and last.has_location else None
    allowed = next((a for a in allow if module == a or module.startswith(a + ".")), None)
    if allowed is not None:
        return PlannedImport(ref, module, origin, f"allowed by name ({allowed})")
    if chain is not None and not found:  # importing it would fail: say so, as the import would
        missing = ".".join(module.split(".")[: len(chain)])
        raise ValueError(f"cannot import module {module!r} (from {ref!r}): no module named {missing!r}")
    root = Path(os.getcwd() if root is None else root).resolve()
    project = f"the project's code (files under the working directory {root}, outside installed packages)"
    if chain is None:
        why = f"it cannot be located without importing the packages it is in, so it is not known to be {project}"
    else:
        outside = [s for s in chain if not _in_project(s, root)]
        if not outside:
            return PlannedImport(ref, module, origin, f"in the project {root}")
        first = outside[0]
        what = first.origin if first.has_location else f"{first.name} ({first.origin or 'no file'})"
        why = f"{what} is not {project}"
    where = f" (from {origin})" if origin else ""
    raise ImportRefused(
        f"not importing {module}{where} to rebuild target {ref}: {why}. Loading a record "
        f"imports only the project's modules: read the record (fuzzdiff corpus show ID), then "
        f"pass --allow-import {module} (allow_import=[{module!r}] in Python) to import it anyway"
    )


def is_module_name(name: str) -> bool:
    """``a.b.c``: dotted identifiers, as ``import`` takes them."""
    return all(p.isidentifier() and not keyword.iskeyword(p) for p in name.split("."))


def _specs(module: str) -> list | None:
    """The specs of ``module`` and of the packages above it, outermost first,
    as importing it would find them, without running any of them. The list
    ends with None where a module does not exist; None where one cannot be
    located without importing its package."""
    _cwd_importable()
    parts = module.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])  # a top-level name imports nothing
    except (ImportError, ValueError):
        return None
    chain = [spec]
    for i in range(1, len(parts)):
        if spec is None:
            return chain
        locations = spec.submodule_search_locations
        if locations is None:  # not a package: no submodule
            return chain + [None]
        name, parent = ".".join(parts[: i + 1]), ".".join(parts[:i])
        try:
            if parent in sys.modules:  # its __path__ as it is now; nothing more runs
                spec = importlib.util.find_spec(name)
            else:
                spec = _find_in(name, list(locations))
        except (ImportError, ValueError):
            return None
        chain.append(spec)
    return chain


def _find_in(name: str, folders: list[str]):
    """The spec of submodule ``name`` in its package's ``folders``, as
    PathFinder finds it, which cannot do so for a namespace package whose
    parent is not imported: the first module or regular package wins, else
    the namespace portions found make a namespace package."""
    portions: list[str] = []
    for folder in folders:
        finder = pkgutil.get_importer(folder)
        spec = finder.find_spec(name) if finder is not None and hasattr(finder, "find_spec") else None
        if spec is None:
            continue
        if spec.loader is not None:
            return spec
        portions += spec.submodule_search_locations or []
    if not portions:
        return None
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = portions
    return spec


def _in_project(spec, root: Path) -> bool:
    """Whether importing ``spec`` runs only code from under ``root``, outside
    installed packages (a namespace package runs none)."""
    if not spec.has_location:
        return spec.origin in (None, "namespace") and spec.submodule_search_locations is not None
    path = Path(spec.origin).resolve()
    return path.is_relative_to(root) and not any(path.is_relative_to(d) for d in _installed())


def is_installed(obj) -> bool:
    """Whether ``obj`` (a class or function) comes from an installed package
    or the standard library, by the file it was defined in."""
    try:
        path = Path(inspect.getfile(obj)).resolve()
    except (TypeError, OSError):
        return True  # built in: no file of its own
    return any(path.is_relative_to(d) for d in _installed())


def _installed() -> list[Path]:
    """The standard library's and the installed packages' folders."""
    folders = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    folders.update(getattr(site, "getsitepackages", list)())
    folders.add(site.getusersitepackages())
    return [Path(f).resolve() for f in folders if f]
