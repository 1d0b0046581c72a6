"""tests/README.md maps every module to its tests, and the map stays true.

A module of fuzzdiff or strategies without a row, a row whose module is gone,
or a listed test file that no longer touches the module fails here, naming it.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path

import pytest

from fuzzdiff.checks import CHECKS

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
README = TESTS / "README.md"


@dataclass(frozen=True)
class Row:
    patterns: tuple[str, ...]  # dotted names, * for the rest of a name
    files: tuple[str, ...]  # test files, relative to tests/
    see: tuple[str, ...]  # modules whose row's tests exercise these

    def __str__(self) -> str:
        return ", ".join(self.patterns)


@cache
def modules() -> frozenset[str]:
    out = set()
    for package in ("fuzzdiff", "strategies"):
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return frozenset(out)


@cache
def rows() -> tuple[Row, ...]:
    out = []
    for line in README.read_text().splitlines():
        if not line.startswith("| `"):
            continue
        named, tests = line.strip().strip("|").split("|")
        listed = re.findall(r"`([^`]+)`", tests)
        out.append(
            Row(
                tuple(re.findall(r"`([^`]+)`", named)),
                tuple(t for t in listed if t.endswith(".py")),
                tuple(t for t in listed if not t.endswith(".py")),
            )
        )
    assert out, f"no table rows found in {README}"
    return tuple(out)


@cache
def covered(row: Row) -> frozenset[str]:
    return frozenset(m for m in modules() if any(fnmatchcase(m, p) for p in row.patterns))


@cache
def mentions(path: Path) -> tuple[frozenset[str], frozenset[str]]:
    """What a file imports or names (dotted), and its string constants."""
    text = path.read_text()
    seen = set(re.findall(r"\b(?:fuzzdiff|strategies)(?:\.\w+)*", text))
    strings = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            seen.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            seen.update([node.module, *(f"{node.module}.{a.name}" for a in node.names)])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.add(node.value)
    return frozenset(seen), frozenset(strings)


def refers(path: Path, names: frozenset[str]) -> bool:
    """Whether a test file imports or names one of ``names``; a check's module
    also by the check's name, which is how tests ask for a check."""
    seen, strings = mentions(path)
    checks = {n.rpartition(".")[2] for n in names if n.startswith("fuzzdiff.checks.")} & CHECKS.keys()
    return bool(seen & names or checks & strings)


def test_every_module_is_in_exactly_one_row():
    where = {m: [r for r in rows() if m in covered(r)] for m in modules()}
    missing = sorted(m for m, found in where.items() if not found)
    assert not missing, f"{README.relative_to(ROOT)} has no row for {missing}: add one, module -> its test files"
    doubled = {m: [str(r) for r in found] for m, found in where.items() if len(found) > 1}
    assert not doubled, f"modules in more than one row of {README.relative_to(ROOT)}: {doubled}"


def test_every_row_names_modules_that_exist():
    stale = [p for r in rows() for p in r.patterns if not any(fnmatchcase(m, p) for m in modules())]
    assert not stale, f"{README.relative_to(ROOT)} names modules that are gone: {stale}"


@pytest.mark.parametrize("row", rows(), ids=str)
def test_a_rows_test_files_exist_and_import_or_name_its_modules(row):
    assert row.files or row.see, f"row {row}: list its test files, or the module whose tests exercise it"
    for name in row.files:
        path = TESTS / name
        assert path.is_file(), f"row {row}: no test file tests/{name}"
        assert refers(path, covered(row)), f"row {row}: tests/{name} neither imports nor names its modules"
    for name in row.see:
        found = [r for r in rows() if name in covered(r)]
        assert name in modules() and found and all(r.files for r in found), (
            f"row {row}: {name} is not a module whose row lists test files"
        )


def test_a_stale_map_is_caught(tmp_path, monkeypatch):
    """The checks above fail on a module without a row, a row for a module
    that is gone, and a test file that does not touch its row's module."""
    (tmp_path / "test_x.py").write_text("import fuzzdiff.case.case\n")
    stale = [Row(("fuzzdiff.no_such_module",), (), ("fuzzdiff.case.case",)), Row(("fuzzdiff.case.spec",), ("test_x.py",), ())]
    here = sys.modules[__name__]
    monkeypatch.setattr(here, "TESTS", tmp_path)
    monkeypatch.setattr(here, "rows", lambda: tuple(stale))
    for test in (
        test_every_module_is_in_exactly_one_row,
        test_every_row_names_modules_that_exist,
        lambda: test_a_rows_test_files_exist_and_import_or_name_its_modules(stale[1]),
    ):
        with pytest.raises(AssertionError):
            test()
    assert refers(tmp_path / "test_x.py", frozenset({"fuzzdiff.case.case"}))
