"""The docs agree with the code: what they count, list and name is the registries'.

Each number a page states about the checks, the catalog or the zoo is read
from the page and compared with the registry it describes; each path and
dotted name it writes must exist. A change to the code that the docs do not
follow fails here, with the page and the stale figure.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections import Counter
from pathlib import Path

import pytest

from fuzzdiff.checks import CHECKS
from fuzzdiff.targets import all_targets

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "pages"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
# What benchmarks.md counts are the runs it reports (a run of 13 checks ran 13): not the registry.
FIGURES_OF_RUNS = {"benchmarks.md"}

NUMBER_WORDS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty"
).split()
NUMBER = r"(\d[\d,]*|" + "|".join(NUMBER_WORDS) + r")"


def _number(text: str) -> int:
    return NUMBER_WORDS.index(text.lower()) if text.lower() in NUMBER_WORDS else int(text.replace(",", ""))


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _where(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def _stated(pattern: str, paths) -> set[tuple[str, int]]:
    """(file, number) for each match of ``pattern`` (the number: its first group that matched)."""
    return {
        (_where(path), _number(next(g for g in m.groups() if g)))
        for path in paths
        for m in re.finditer(pattern, _text(path), flags=re.I)
    }


# -- the checks ------------------------------------------------------------------------------

# "the 15 checks", "13 registered checks", "running fifteen checks", "there are 15:" (a number word
# only after a word that makes it a count: "two checks may each have" is not one)
CHECK_COUNT = (
    rf"(?:\b(?:the|all|running|runs|over) {NUMBER}|\b(\d+))(?: registered| stable)? checks\b|\bthere are (\d+):"
)


def _counted_checks(paths) -> set[tuple[str, int]]:
    return _stated(CHECK_COUNT, paths)


def test_the_count_pattern_reads_the_ways_the_docs_count_checks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "the 13 registered checks; running fifteen checks in a row; there are 14:\n"
        "two checks may each have a function; all 16 checks\n"
    )
    assert {n for _, n in _counted_checks([page])} == {13, 14, 15, 16}


def test_every_count_of_the_checks_is_the_registrys():
    sources = [*ROOT.glob("fuzzdiff/**/*.py"), *ROOT.glob("strategies/**/*.py")]
    counted = _counted_checks([p for p in [*PAGES, *sources] if p.name not in FIGURES_OF_RUNS])
    assert counted, "no page counts the checks: the pattern above no longer finds them"
    wrong = sorted((where, n) for where, n in counted if n != len(CHECKS))
    assert not wrong, f"the registry has {len(CHECKS)} checks; these say otherwise: {wrong}"


def test_the_checks_page_lists_every_registered_check_once():
    text = _text(DOCS / "checks.md")
    text = text[: text.index("`fuzzdiff list` prints")]  # the first table
    rows = re.findall(r"^\| `(\w+)` \|", text, flags=re.M)
    assert sorted(rows) == sorted(CHECKS), sorted(set(rows) ^ set(CHECKS))


NOT_CHECK_SECTIONS = {"float32"}  # "## float32 against float64"


def test_the_checks_page_has_a_section_per_registered_check():
    """A ``## name`` heading (or ``## name and ...``) for each check, and none for a check not registered."""
    headings = re.findall(r"^## (\w+)\b", _text(DOCS / "checks.md"), flags=re.M)
    missing = [name for name in CHECKS if name not in headings]
    assert not missing, f"docs/pages/checks.md has no section for {missing}"
    # a section named like a check (lower case) that the registry does not have
    unknown = [h for h in headings if h.islower() and h not in CHECKS and h not in NOT_CHECK_SECTIONS]
    assert not unknown, f"sections for checks that are not registered: {unknown}"


# -- the catalog -----------------------------------------------------------------------------


def test_every_count_of_the_catalog_is_the_registrys():
    catalog = all_targets()
    families = Counter(t.family for t in catalog)
    # "the 203 catalog targets", "the 203-target catalog", "203 declarative targets" (not "40 catalog targets"
    # drawn for a profile)
    targets = _stated(r"\bthe (\d+) catalog targets|\bthe (\d+)-target catalog|(\d+) declarative targets", PAGES)
    assert targets, "no page counts the catalog's targets: the pattern no longer finds them"
    assert {n for _, n in targets} == {len(catalog)}, sorted(targets)
    counted = _stated(r"declarative targets in (\d+) families", PAGES)
    assert {n for _, n in counted} == {len(families)}, sorted(counted)


def test_the_targets_page_table_of_families_is_the_catalogs():
    text = _text(DOCS / "targets.md")
    table = text[text.index("| family | targets |") : text.index("`fuzzdiff list` prints")]
    stated = dict(re.findall(r"\| (\w+) \| (\d+) ", table))
    families = Counter(t.family for t in all_targets())
    assert {k: int(v) for k, v in stated.items()} == dict(families)


# -- the zoo ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def zoo():
    return importlib.import_module("tests.selftest.zoo")


def test_the_zoo_page_counts_and_tables_every_planted_bug(zoo):
    text = _text(DOCS / "zoo.md")
    counted = _stated(r"plants (\d+)", [DOCS / "zoo.md"])
    assert {n for _, n in counted} == {len(zoo.ZOO)}, sorted(counted)
    # | bug | what is wrong | trigger | check | examples | check runs | seconds | shrunk case |
    rows = re.findall(r"^\| (\w+) \| .* \| (\w+) \| (\w+) \| \d+ \| \d+ \| [\d.]+ \|", text, flags=re.M)
    assert sorted((name, trigger, check) for name, trigger, check in rows) == sorted(
        (p.name, p.trigger, p.check) for p in zoo.ZOO
    )
    for trigger in zoo.TRIGGERS:
        assert text.count(f"`{trigger}`") >= 1, f"zoo.md does not name the trigger {trigger!r}"


# -- paths and names -------------------------------------------------------------------------

PATH = re.compile(r"(?<![\w/.-])((?:fuzzdiff|bench|strategies|tests|docs)/[\w./-]*[\w/])")


def _paths(text: str) -> set[str]:
    """The paths written in ``text``; one that goes on with a placeholder
    (``fuzzdiff/checks/<name>.py``) is a pattern, not a path."""
    return {m.group(1) for m in PATH.finditer(text) if not text.startswith("<", m.end())}


def test_the_path_pattern_reads_paths_and_skips_placeholders():
    found = _paths("`fuzzdiff/checks/costs.py`, bench/check.py. tests/unit/test_<name>.py /tmp/fuzzdiff/x docs/pages/a.md#b")
    assert found == {"fuzzdiff/checks/costs.py", "bench/check.py", "docs/pages/a.md"}


def test_every_path_the_docs_write_exists():
    paths = {(path, p) for path in PAGES for p in _paths(_text(path))}
    assert len(paths) > 50, "the pattern no longer finds the docs' paths"
    missing = sorted(f"{path.relative_to(ROOT)}: {p}" for path, p in paths if not (ROOT / p).exists())
    assert not missing, "\n".join(missing)


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a name below a module that is no package
        return False


def _resolves(dotted: str) -> bool:
    """The longest prefix that is a module, imported (an error importing it is
    raised, not taken for a missing name), then the rest as attributes."""
    parts = dotted.split(".")
    k = len(parts)
    while k > 1 and not _is_module(".".join(parts[:k])):
        k -= 1
    obj = importlib.import_module(".".join(parts[:k]))
    for name in parts[k:]:
        if not hasattr(obj, name):
            return False
        obj = getattr(obj, name)
    return True


# The docs also name things relative to fuzzdiff (`confirm.steps.kink`, `checks.twins.judge_twins`); a
# name that starts like one of these packages is taken for such a name. Left out: packages whose names
# the docs also give to values (`case.params`).
RELATIVE = "campaign checking checks confirm corpus guards paths search script targets verdict"


def _dotted_names(text: str) -> set[str]:
    full = re.findall(r"`((?:fuzzdiff|strategies)(?:\.\w+)+)", text)
    relative = re.findall(rf"`((?:{'|'.join(RELATIVE.split())})(?:\.\w+)+)(?=[`(])", text)
    return {*full, *(f"fuzzdiff.{name}" for name in relative if not name.endswith(".py"))}


def test_every_dotted_name_the_docs_write_resolves():
    names = {(path.name, name) for path in PAGES for name in _dotted_names(_text(path))}
    assert len(names) > 60, "the pattern no longer finds the docs' dotted names"
    unresolved = sorted(f"{page}: {name}" for page, name in names if not _resolves(name))
    assert not unresolved, "\n".join(unresolved)


def test_every_page_is_in_the_nav_once():
    nav = re.findall(r"^\s+- [^:\n]+: (\S+\.md)\s*$", _text(ROOT / "docs" / "mkdocs.yml"), flags=re.M)
    assert sorted(nav) == sorted(p.name for p in DOCS.glob("*.md"))


def test_the_extending_page_names_the_registration_and_the_benchmarks():
    text = _text(DOCS / "extending.md")
    for needed in (
        "fuzzdiff/checks/__init__.py",
        "<name>.CHECK",
        "Check.script",
        "cost=Cost(",
        "opinfo=OpInfoRole(",
        "fuzzdiff/targets/catalog/",
        "fuzzdiff/targets/known.py",
        "docs/pages/checks.md",
        "docs/pages/discrepancies.md",
        "python bench/campaign.py --budget 600 --seed 1",
        "python bench/throughput.py",
        "python bench/check.py",
    ):
        assert needed in text, f"extending.md does not say {needed!r}"


def test_the_ci_profile_table_is_each_checks_ci_sample():
    text = _text(DOCS / "campaigns.md")
    rows = re.findall(r"^\| `(\w+)` \| [^|]*?(\d+) (?:sampled|catalog targets)[^|]* \| (\d+) \|$", text, flags=re.M)
    stated = {name: (int(n), int(k)) for name, n, k in rows}
    sampled = {c.name: (c.ci.targets, c.ci.max_examples) for c in CHECKS.values() if c.ci is not None}
    assert stated == sampled
