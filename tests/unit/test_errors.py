"""Every exception class under fuzzdiff/ is of fuzzdiff's one family (fuzzdiff.errors).

An error derives from FuzzdiffError (and keeps the builtin base its callers
catch it by); an interrupt derives from FuzzdiffInterrupt and stays out of
``except Exception``, as KeyboardInterrupt does.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import fuzzdiff
from fuzzdiff.errors import FAMILY, FuzzdiffError, FuzzdiffInterrupt

PACKAGE = Path(fuzzdiff.__file__).parent


def _modules():
    yield "fuzzdiff"
    for info in pkgutil.walk_packages([str(PACKAGE)], prefix="fuzzdiff."):
        if info.name != "fuzzdiff.__main__":
            yield info.name


def _classes(namespace, module):
    for value in vars(namespace).values():
        if inspect.isclass(value) and value.__module__ == module:
            yield value
            yield from _classes(value, module)


def _exceptions():
    for name in _modules():
        try:
            module = importlib.import_module(name)
        except ImportError as e:  # an optional dependency (ray): its classes are checked where it is installed
            if e.name == name or (e.name or "").startswith("fuzzdiff"):
                raise
            continue
        for cls in _classes(module, name):
            if issubclass(cls, BaseException) and not issubclass(cls, Warning):  # a warning's category: no error
                yield cls


def test_every_exception_class_is_of_the_family():
    found = list(_exceptions())
    assert len(found) >= 20, "the walk no longer finds fuzzdiff's exception classes"
    strays = [f"{c.__module__}.{c.__qualname__}" for c in found if not issubclass(c, FAMILY)]
    assert not strays, f"exception classes outside fuzzdiff.errors' family: {strays}"
    errors = [c for c in found if issubclass(c, Exception)]
    assert all(issubclass(c, FuzzdiffError) for c in errors)
    interrupts = [c for c in found if not issubclass(c, Exception)]
    assert interrupts and all(issubclass(c, FuzzdiffInterrupt) for c in interrupts)


def test_no_exception_class_is_defined_out_of_reach():
    """A class inside a function escapes the walk above: there are none."""
    hidden = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                hidden += [f"{path.relative_to(PACKAGE.parent)}:{c.lineno}" for c in ast.walk(fn)
                           if isinstance(c, ast.ClassDef) and c.bases]
    assert not hidden, f"classes defined inside functions: {hidden}"


def test_an_interrupt_passes_except_exception():
    class Stop(FuzzdiffInterrupt):
        pass

    def swallowing():
        try:
            raise Stop
        except Exception:  # what code under test may write
            return "swallowed"

    with pytest.raises(Stop):
        swallowing()
    assert not issubclass(FuzzdiffInterrupt, Exception) and issubclass(FuzzdiffError, Exception)


def test_an_error_keeps_its_builtin_base():
    from fuzzdiff.case.spec import SpecError
    from fuzzdiff.targets import UnknownTarget

    assert issubclass(SpecError, ValueError) and issubclass(SpecError, FuzzdiffError)
    assert issubclass(UnknownTarget, KeyError) and issubclass(UnknownTarget, FuzzdiffError)
