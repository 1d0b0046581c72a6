"""Coverage report of a campaign: a targets x checks heatmap, as HTML and PNG.

Colour says how many examples each pair ran (where the search has been),
a red outline and count say where it failed. ``results.json`` keeps the raw
per-pair counts beside them, so reports can be regenerated (``write_report``
from ``read_results``) or merged across machines (``merge_results``) without
rerunning anything.
"""

from __future__ import annotations

import html
import json
import math
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fuzzdiff.search.layout_tour import met
from fuzzdiff.verdict import headline

__all__ = ["pair_rows", "write_report", "read_results", "merge_results", "covered", "FORMAT"]

FORMAT = 1
VERDICTS = ("pass", "fail", "unsupported", "inconclusive", "known", "timeout", "crash")


def pair_rows(campaign, pairs: Iterable = ()) -> list[dict]:
    """One plain row per (target, check) pair of a fuzzdiff.campaign.results.Campaign;
    with ``pairs`` (the campaign's (Target, Check) pairs) also a row for each
    pair that never started, so the heatmap shows what was not covered."""
    rows = []
    for r in campaign.results:
        counts = {k: int(v) for k, v in r.tally.counts.items() if v}
        message = r.error or (r.failure.verdict.message if r.failure is not None else "")
        rows.append(
            {
                "target": r.target,
                "check": r.check,
                "examples": r.tally.examples,
                "counts": counts,
                "failed": r.failed,
                "crashed": r.crashed,
                "cut": r.cut,
                "known": r.known,
                "known_hits": dict(r.tally.known),
                "batches": r.batches,
                "scores": list(r.scores),
                "new_records": r.new_records,
                "seconds": round(r.seconds, 3),
                "found_at": None if r.found_at is None else round(r.found_at, 1),
                "ref": r.ref,
                "family": r.family,
                "message": headline(message)[:300],
                "layout_classes": sorted(met(r.first_batch_features)),
            }
        )
    started = {(r.target, r.check) for r in campaign.results}
    for target, check in pairs:
        if (target.name, check.name) not in started:
            rows.append(
                {
                    "target": target.name,
                    "ref": target.ref,
                    "family": target.family,
                    "check": check.name,
                    "examples": 0,
                    "counts": {},
                    "failed": False,
                    "crashed": False,
                    "cut": False,
                    "known": False,
                    "batches": 0,
                    "scores": [],
                    "new_records": 0,
                    "seconds": 0.0,
                    "message": "",
                }
            )
    return rows


def merge_results(*results: Mapping) -> dict:
    """Several results.json contents as one: a pair run in several adds up."""
    pairs: dict[tuple[str, str], dict] = {}
    for res in results:
        for row in res["pairs"]:
            key = (row["target"], row["check"])
            if key not in pairs:
                pairs[key] = {**row, "counts": dict(row["counts"])}
                continue
            m = pairs[key]
            m["counts"] = dict(Counter(m["counts"]) + Counter(row["counts"]))
            for k in ("examples", "new_records", "seconds", "batches"):
                m[k] = m.get(k, 0) + row.get(k, 0)
            m["scores"] = m.get("scores", []) + row.get("scores", [])
            for k in ("failed", "crashed", "cut", "known"):
                m[k] = m.get(k, False) or row.get(k, False)
            m["message"] = m["message"] or row["message"]
    return {
        "format": FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "meta": {"merged": [res.get("meta", {}) for res in results]},
        "pairs": list(pairs.values()),
    }


def read_results(path: Path | str) -> dict:
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    data = json.loads(path.read_text())
    if data.get("format") != FORMAT or not isinstance(data.get("pairs"), list):
        raise ValueError(f"{path}: not a fuzzdiff results.json of format {FORMAT}")
    return data


def write_report(
    directory: Path | str, pairs: Sequence[Mapping], *, meta: Mapping | None = None, title: str = "fuzzdiff coverage"
) -> dict[str, Path]:
    """Write ``results.json``, ``heatmap.html`` and ``heatmap.png`` into ``directory``."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "format": FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "meta": dict(meta or {}),
        "pairs": [dict(p) for p in pairs],
    }
    out = {"results": folder / "results.json", "html": folder / "heatmap.html", "png": folder / "heatmap.png"}
    out["results"].write_text(json.dumps(results, indent=1, sort_keys=True))
    grid = _Grid(results["pairs"])
    out["html"].write_text(_html(grid, title, results["meta"]))
    _png(grid, title, out["png"])
    return out


class _Grid:
    """Targets (rows) x checks (columns), in first-seen check order."""

    def __init__(self, pairs: Iterable[Mapping]):
        self.cells: dict[tuple[str, str], Mapping] = {}
        checks: dict[str, None] = {}
        for p in pairs:
            self.cells[(p["target"], p["check"])] = p
            checks.setdefault(p["check"], None)
        self.checks = list(checks)
        self.targets = sorted({t for t, _ in self.cells})
        self.top = max((p["examples"] for p in self.cells.values()), default=0)

    def get(self, target: str, check: str) -> Mapping | None:
        return self.cells.get((target, check))

    def level(self, examples: int) -> float:
        """0..1 on a log scale: a handful of examples already shows."""
        return math.log1p(examples) / math.log1p(self.top) if self.top else 0.0


def failures(cell: Mapping) -> int:
    """Failing verdicts of a pair, a worker crash counting as one; none for a
    pair whose failure is its target's known discrepancy."""
    if not cell["failed"]:
        return 0
    c = cell["counts"]
    n = c.get("fail", 0) + c.get("timeout", 0) + c.get("crash", 0) + int(cell["crashed"])
    return n or int(cell["failed"])


def covered(cell: Mapping) -> bool:
    """The pair ran at least one batch (a worker that died running it ran one)."""
    return cell.get("batches", 0) > 0 or cell["examples"] > 0 or cell["crashed"] or cell["failed"]


def _tooltip(cell: Mapping) -> str:
    c = cell["counts"]
    scores = cell.get("scores") or []
    parts = [
        f"{cell['target']} x {cell['check']}: {cell['examples']} examples in "
        f"{cell.get('batches', '?')} batches" + (f", score {scores[-1]:g}" if scores else ""),
        ", ".join(f"{k} {c.get(k, 0)}" for k in VERDICTS if c.get(k, 0) or k in VERDICTS[:4]),
    ]
    if cell["crashed"]:
        parts.append("the worker died")
    if cell.get("known"):
        parts.append("examples matched a known discrepancy (fuzzdiff.targets.known)")
    if cell["cut"]:
        parts.append("stopped by its time limit")
    if cell["new_records"]:
        parts.append(f"new corpus records {cell['new_records']}")
    if cell["message"]:
        parts.append(cell["message"])
    return "\n".join(parts)


def _colour(level: float) -> str:
    """White to deep blue."""
    lo, hi = (247, 251, 255), (8, 69, 148)
    return "#{:02x}{:02x}{:02x}".format(*tuple(round(a + (b - a) * level) for a, b in zip(lo, hi)))


def _html(grid: _Grid, title: str, meta: Mapping) -> str:
    e = html.escape
    head = "".join(f"<th class=c><div>{e(c)}</div></th>" for c in grid.checks)
    rows = []
    for t in grid.targets:
        cells = []
        for c in grid.checks:
            cell = grid.get(t, c)
            if cell is None:
                cells.append(f'<td class=none title="{e(t)} x {e(c)}: not applicable">&middot;</td>')
                continue
            if not covered(cell):
                cells.append(f'<td class=uncovered title="{e(t)} x {e(c)}: not reached">&ndash;</td>')
                continue
            level = grid.level(cell["examples"])
            fg = "#fff" if level > 0.6 else "#000"
            bad = failures(cell)
            known = not bad and cell.get("known")
            cls = "fail" if bad else "known" if known else "cut" if cell["cut"] else ""
            text = f"{cell['examples']}" + (f"<b>&#x2716;{bad}</b>" if bad else "<i>k</i>" if known else "")
            cells.append(
                f'<td class="{cls}" style="background:{_colour(level)};color:{fg}" '
                f'title="{e(_tooltip(cell))}">{text}</td>'
            )
        rows.append(f"<tr><th class=t>{e(t)}</th>{''.join(cells)}</tr>")
    info = ", ".join(f"{e(str(k))}: {e(str(v))}" for k, v in meta.items())
    ncovered = sum(1 for cell in grid.cells.values() if covered(cell))
    nfail = sum(1 for cell in grid.cells.values() if failures(cell))
    nknown = sum(1 for cell in grid.cells.values() if not failures(cell) and cell.get("known"))
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{e(title)}</title>
<style>
body {{ font: 13px system-ui, sans-serif; margin: 1.5em; }}
table {{ border-collapse: separate; border-spacing: 2px; }}
td {{ min-width: 3.2em; height: 1.5em; text-align: center; font-size: 11px; border: 2px solid transparent; }}
td.none {{ background: #eee; color: #999; }}
td.uncovered {{ background: #fde9c8; color: #a06000; }}
td.fail {{ border: 2px solid #d00; }}
td.fail b {{ color: #d00; background: #fff; padding: 0 2px; margin-left: 3px; border-radius: 3px; }}
td.cut {{ border: 2px dashed #999; }}
td.known {{ border: 2px dashed #e08000; }}
td.known i {{ color: #e08000; background: #fff; padding: 0 2px; margin-left: 3px; font-style: normal; }}
th.t {{ text-align: right; font-weight: normal; padding-right: .5em; white-space: nowrap; }}
th.c {{ height: 7em; vertical-align: bottom; }}
th.c div {{ writing-mode: vertical-rl; transform: rotate(180deg); }}
.legend span {{ display: inline-block; padding: 2px 8px; margin-right: 4px; }}
</style></head><body>
<h1>{e(title)}</h1>
<p>{info}</p>
<p>{len(grid.targets)} targets x {len(grid.checks)} checks: {ncovered} of {len(grid.cells)} applicable pairs covered,
{nfail} with failures, {nknown} with a known discrepancy. Colour: examples run (log scale, darkest {grid.top}).
Hover a cell for its verdict counts.</p>
<p class=legend><span style="background:{_colour(0.1)}">few examples</span><span
 style="background:{_colour(1.0)};color:#fff">many</span><span
 style="border:2px solid #d00">&#x2716; failures</span><span
 style="border:2px dashed #e08000">k known discrepancy</span><span
 style="border:2px dashed #999">cut by its time limit</span><span style="background:#fde9c8">not reached</span><span
 style="background:#eee">not applicable</span></p>
<table><tr><th></th>{head}</tr>
{chr(10).join(rows)}
</table></body></html>
"""


def _png(grid: _Grid, title: str, path: Path) -> None:
    # startup time: matplotlib takes a second to import and only --report needs
    # it; and the Agg backend must be chosen before pyplot is imported
    import matplotlib

    matplotlib.use("Agg")
    # only now, with the backend chosen
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    nt, nc = max(len(grid.targets), 1), max(len(grid.checks), 1)
    levels = np.full((nt, nc), np.nan)
    for i, t in enumerate(grid.targets):
        for j, c in enumerate(grid.checks):
            cell = grid.get(t, c)
            if cell is not None and covered(cell):
                levels[i, j] = math.log10(1 + cell["examples"])
    fig, ax = plt.subplots(figsize=(3.5 + 0.6 * nc, 2.0 + 0.2 * nt), layout="constrained")
    cmap = matplotlib.colormaps["Blues"].with_extremes(bad="#e6e6e6")
    image = ax.imshow(
        np.ma.masked_invalid(levels),
        cmap=cmap,
        aspect="auto",
        vmin=0,
        vmax=max(math.log10(1 + grid.top), 1.0),
        interpolation="nearest",
    )
    for i, t in enumerate(grid.targets):
        for j, c in enumerate(grid.checks):
            cell = grid.get(t, c)
            if cell is None:
                continue
            if not covered(cell):
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, color="#fde9c8"))
                continue
            bad = failures(cell)
            if not bad and cell.get("known"):
                ax.add_patch(
                    Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="#e08000", linewidth=1.5, linestyle="--")
                )
            if not bad and nt * nc <= 400:
                ax.text(
                    j,
                    i,
                    str(cell["examples"]),
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="white" if levels[i, j] > 0.6 * math.log10(1 + grid.top) else "black",
                )
            if bad:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="#d00000", linewidth=2))
                ax.text(
                    j,
                    i,
                    f"x{bad}",
                    ha="center",
                    va="center",
                    color="#d00000",
                    fontsize=7,
                    fontweight="bold",
                    bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none"),
                )
    ax.set_xticks(range(len(grid.checks)), grid.checks, fontsize=8)
    ax.set_yticks(range(len(grid.targets)), grid.targets, fontsize=7)
    ax.xaxis.set_ticks_position("top")
    plt.setp(ax.get_xticklabels(), rotation=60, ha="left", rotation_mode="anchor")
    bar = fig.colorbar(image, ax=ax, shrink=min(1.0, 20 / nt), pad=0.02, aspect=30)
    bar.set_label("log10(1 + examples)", fontsize=8)
    fig.suptitle(
        f"{title}: examples per (target, check); red box: failures (count); "
        "orange dashes: known discrepancy; peach: not reached; grey: not applicable",
        fontsize=9,
    )
    fig.savefig(path, dpi=110)
    plt.close(fig)
