"""The coverage report: results.json, heatmap.html and heatmap.png."""

import json
import re
from collections import Counter

from fuzzdiff.campaign.results import Campaign, Found, PairResult
from fuzzdiff.case.case import Arg, Case
from fuzzdiff.search.fuzzing import Tally
from fuzzdiff.campaign.heatmap import merge_results, pair_rows, read_results, write_report
from fuzzdiff.verdict import Verdict

TARGETS = ("sin", "cos", "planted<bad>")
CHECKS = ("grad", "layout", "dtype")


def _campaign() -> Campaign:
    c = Campaign()
    for t in TARGETS:
        for k, check in enumerate(CHECKS):
            tally = Tally(Counter({"pass": 10 * (k + 1), "unsupported": k}))
            r = PairResult(t, check, tally, seconds=0.5)
            if t == "planted<bad>" and check == "grad":
                tally.counts["fail"] = 7
                r.failure = Found("grad", t, Case(t, (Arg((2,)),)), Verdict("fail", "grad: 3.0 vs 2.0"),
                                  "corpus/grad/x/1.json", True)
            if t == "cos" and check == "dtype":
                tally.counts["known"] = 2
                tally.known["float32 off, a known discrepancy"] = 2
            c.results.append(r)
    c.results.append(PairResult("aborting", "grad", Tally(), error="the worker died (SIGABRT)",
                                crashed=True, crash_records=["corpus/grad/aborting/2.json"]))
    return c


def _cells(html: str) -> dict[tuple[str, str], str]:
    """(target, check) -> the cell's <td> markup, from the rendered table."""
    checks = re.findall(r"<th class=c><div>(.*?)</div></th>", html)
    out = {}
    for target, cells in re.findall(r"<tr><th class=t>(.*?)</th>(.*?)</tr>", html, re.S):
        for check, td in zip(checks, re.findall(r"<td.*?</td>", cells, re.S)):
            out[(target, check)] = td
    return out


def test_every_file_is_written_with_every_target_and_check(tmp_path):
    rows = pair_rows(_campaign())
    out = write_report(tmp_path / "rep", rows, meta={"budget": 60})
    html = out["html"].read_text()
    cells = _cells(html)
    for t in (*TARGETS, "aborting"):
        assert f"<th class=t>{t.replace('<', '&lt;').replace('>', '&gt;')}</th>" in html
    assert len(cells) == 4 * 3
    assert out["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out["png"].stat().st_size > 5000
    saved = json.loads(out["results"].read_text())
    assert saved["meta"] == {"budget": 60} and len(saved["pairs"]) == 10


def test_failure_cells_are_marked_with_their_count_and_tooltips_hold_the_counts(tmp_path):
    html = write_report(tmp_path, pair_rows(_campaign()))["html"].read_text()
    cells = _cells(html)
    bad = cells[("planted&lt;bad&gt;", "grad")]
    assert 'class="fail"' in bad and "&#x2716;7" in bad
    assert "pass 10, fail 7, unsupported 0, inconclusive 0" in bad
    assert "new corpus records 1" in bad and "grad: 3.0 vs 2.0" in bad
    crash = cells[("aborting", "grad")]
    assert 'class="fail"' in crash and "&#x2716;1" in crash and "the worker died" in crash
    good = cells[("sin", "layout")]
    assert 'class="fail"' not in good and ">21<" in good and "pass 20, fail 0, unsupported 1" in good
    assert "not applicable" in cells[("aborting", "layout")]
    known = cells[("cos", "dtype")]
    assert 'class="known"' in known and "<i>k</i>" in known and "&#x2716;" not in known
    assert "known discrepancy" in known and "known 2" in known and "fail 0" in known
    assert "2 with failures, 1 with a known discrepancy" in html
    # darker for more examples
    shade = {c: re.search(r"background:#(..)", cells[("sin", c)]).group(1) for c in CHECKS}
    assert int(shade["grad"], 16) > int(shade["layout"], 16) > int(shade["dtype"], 16)


def test_results_are_read_back_and_merged(tmp_path):
    rows = pair_rows(_campaign())
    write_report(tmp_path / "a", rows)
    first = read_results(tmp_path / "a")
    both = merge_results(first, first)
    pair = next(p for p in both["pairs"] if (p["target"], p["check"]) == ("sin", "dtype"))
    assert pair["counts"] == {"pass": 60, "unsupported": 4} and pair["examples"] == 64
    out = write_report(tmp_path / "b", both["pairs"])
    assert "&#x2716;14" in _cells(out["html"].read_text())[("planted&lt;bad&gt;", "grad")]


def test_pairs_never_reached_are_rows_and_cells_of_their_own(tmp_path):
    from fuzzdiff.checks import get_check
    from fuzzdiff.targets import get_target
    campaign = _campaign()
    campaign.results[0].batches, campaign.results[0].scores = 2, [1.5, 0.75]
    never = (get_target("tanh"), get_check("grad"))
    rows = pair_rows(campaign, [never])
    row = next(r for r in rows if r["target"] == "tanh")
    assert row["batches"] == 0 and row["examples"] == 0 and row["ref"] == "tanh"
    html = write_report(tmp_path, rows)["html"].read_text()
    cells = _cells(html)
    assert 'class=uncovered' in cells[("tanh", "grad")] and "not reached" in cells[("tanh", "grad")]
    assert "2 batches, score 0.75" in cells[("sin", "grad")]
    assert "10 of 11 applicable pairs covered" in html
