"""The docs agree with the code: the checks they count and list are the registry's."""

from __future__ import annotations

import re
from pathlib import Path

from fuzzdiff.checks import CHECKS

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "pages").glob("*.md"))]


def test_every_count_of_the_checks_is_the_registrys():
    counted = {
        (page.name, int(n))
        for page in PAGES
        for n in re.findall(r"(?:the|there are) (\d+)(?: checks|:)", page.read_text())
        if page.name != "benchmarks.md"  # figures of past runs say what they ran
    }
    assert counted, "no page counts the checks: the pattern above no longer finds them"
    assert {n for _, n in counted} == {len(CHECKS)}, sorted(counted)


def test_the_checks_page_lists_every_registered_check_once():
    text = (ROOT / "docs" / "pages" / "checks.md").read_text()
    text = text[: text.index("`fuzzdiff list` prints")]  # the first table
    rows = re.findall(r"^\| `(\w+)` \|", text, flags=re.M)
    assert sorted(rows) == sorted(CHECKS), sorted(set(rows) ^ set(CHECKS))


DATED = re.compile(r"\bissue \d+|\bolder\b|\btoday's\b|\blent\b", re.I)


def test_no_wording_dates_itself_or_points_at_a_tracker():
    files = [*PAGES, *ROOT.glob("fuzzdiff/**/*.py"), *ROOT.glob("strategies/**/*.py"), *ROOT.glob("bench/*.py")]
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if DATED.search(line)
    ]
    assert not found, "\n".join(found)
