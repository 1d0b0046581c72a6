"""docs/pages/discrepancies.md is written by fuzzdiff.corpus.discrepancies_page from the known
signatures and the corpus: the committed page must be what they give today."""

from __future__ import annotations

import difflib
from dataclasses import replace
from pathlib import Path

import pytest

from fuzzdiff.targets.known import Known
from fuzzdiff.corpus.discrepancies_page import COMMAND, CONVENTIONS, _text, read_corpus, render, signatures
from fuzzdiff.targets import all_targets, discrepancies
from fuzzdiff.targets.opinfo.known import KNOWN

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "pages" / "discrepancies.md"


@pytest.fixture(scope="module")
def fresh() -> str:
    return render(signatures(), read_corpus(ROOT / "corpus"))


def test_the_committed_page_is_the_generated_one(fresh):
    committed = PAGE.read_text()
    if committed != fresh:
        diff = "\n".join(
            list(
                difflib.unified_diff(
                    committed.splitlines(), fresh.splitlines(), "committed", "generated", lineterm="", n=0
                )
            )[:20]
        )
        pytest.fail(f"docs/pages/discrepancies.md is stale; from the repository root run\n    {COMMAND}\n{diff}")


def _declared() -> list[Known]:
    """Every Known the code declares, found independently of the generator's walk."""
    found = [k for t in all_targets() for k in t.known] + [k for _, k in KNOWN]
    for value in vars(discrepancies).values():
        found += [k for k in (value if isinstance(value, tuple) else (value,)) if isinstance(k, Known)]
    return list({id(k): k for k in found}.values())


def test_every_signature_is_on_the_page_once_with_its_records(fresh):
    declared = _declared()
    assert len(declared) > 80, "the walk no longer finds the signatures"
    assert {id(s.known) for s in signatures()} == {id(k) for k in declared}
    for k in declared:
        cell = _text(k.reason)
        assert fresh.count(cell) >= 1, f"not on the page: {k.reason[:100]}"
        for rid in k.records:
            assert f"`{rid}`" in fresh, f"record {rid} of {k.reason[:60]!r} is not on the page"


def test_conventions_have_their_own_section_and_bugs_stay_out_of_it(fresh):
    before, _, conventions = fresh.partition(f"## {CONVENTIONS}")
    conventions = conventions.split("\n## ")[0]
    expected = [k for k in _declared() if k.expected]
    assert expected, "no signature is declared expected"
    for k in _declared():
        cell = _text(k.reason)
        where = conventions if k.expected else before
        assert cell in where, f"{'a convention' if k.expected else 'a bug'} in the wrong section: {k.reason[:80]}"
        if k.expected:
            assert _text(k.expected) in conventions


def test_the_counts_are_the_corpus_counts():
    """Re-marking one open record as expected moves it between the counts."""
    records = read_corpus(ROOT / "corpus")
    sigs = signatures()

    def counts(records) -> str:
        n = {s: sum(r.status == s for r in records) for s in ("open", "fixed", "expected")}
        return f"holds {len(records)} records: {n['open']} `open`, {n['fixed']} `fixed` and {n['expected']} `expected`"

    i = next(i for i, r in enumerate(records) if r.status == "open")
    moved = [*records[:i], replace(records[i], status="expected", reason="documented"), *records[i + 1 :]]
    assert counts(moved) != counts(records)
    assert counts(records) in render(sigs, records)
    assert counts(moved) in render(sigs, moved)
