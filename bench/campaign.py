"""The default campaign from an empty corpus: coverage, examples/s, and what it rediscovers.

Runs ``fuzzdiff run --budget SECONDS`` (the README's main job, every default
option) with a fresh corpus and report directory, then prints:

- coverage: pairs swept of pairs applicable, by family (catalog, distributions,
  OpInfo, modules), and of the pairs that do not compile;
- examples per second over the campaign;
- distinct root causes hit: the known signatures matched and the new
  failures, each counted once however many pairs hit it; and those hit by
  module and distribution targets;
- each worker's peak resident memory (a slot's workers, replaced or not);
- how many pairs met each layout class in their first batch;
- worker time by check: batches, seconds a batch and milliseconds an example
  (the costs a plan of the budget is made from);
- for every ``open`` record of the committed corpus (CPU, the checks named by
  ``--checks``; by default the eager ones, vmap and per_sample), whether the
  campaign failed the same (target, check) pair, and when.

    python bench/campaign.py                  # 600 s, seed 1
    python bench/campaign.py --budget 1800 --seed 2
    python bench/campaign.py --results DIR    # re-read a campaign's report, run nothing
    python bench/campaign.py --plant          # with bench/planted.py's two bugs among the targets

A record is rediscovered when the campaign reports a failure (new, known or a
crash) for the same target and check.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from fuzzdiff.checks import CHECKS  # noqa: E402
from fuzzdiff.search.layout_tour import TOUR  # noqa: E402
from fuzzdiff.search.root_cause import message_pattern  # noqa: E402
COMPILING = {name for name, check in CHECKS.items() if check.compiles}  # swept last, in what the budget leaves
EAGER = ("grad", "forward", "gradgrad", "layout", "alias", "mutation", "dtype", "vmap", "per_sample")


def open_records(corpus: Path, checks) -> list[dict]:
    out = []
    for path in sorted(corpus.glob("*/*/*.json")):
        record = json.loads(path.read_text())
        if record["status"] == "open" and record.get("device", "cpu") == "cpu" and record["check"] in checks:
            out.append(record)
    return out


def root_causes(pairs: list[dict]) -> tuple[set[str], set[tuple[str, str]]]:
    """The distinct root causes a campaign hit, each counted once however many
    pairs hit it: the known signatures matched, and the new failures by check and
    message with numbers and shapes left open (fuzzdiff.search.root_cause)."""
    known = {k for p in pairs for k in p.get("known_hits", {})}
    new = {
        (p["check"], message_pattern(p.get("message", "")))
        for p in pairs
        if p.get("failed") and not drew_nothing(p) and not p.get("ref", "").startswith("bench.planted:")
    }
    return known, new


def drew_nothing(pair: dict) -> bool:
    """A pair whose every draw lay outside its target's domain: a target to mend, not a bug found."""
    return str(pair.get("message", "")).startswith("AllRejected")


def family(pair: dict) -> str:
    """opinfo, modules (ModuleInfo's and the catalog's module targets), distributions, or catalog."""
    name, fam = pair.get("ref") or pair["target"], pair.get("family") or ""
    if fam == "opinfo" or name.startswith("opinfo/"):
        return "opinfo"
    if fam in ("moduleinfo", "modules") or name.startswith("modules/"):
        return "modules"
    return "distributions" if fam == "distributions" else "catalog"


def by_check(pairs: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for p in pairs:
        out.setdefault(p["check"], []).append(p)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--checks", nargs="+", default=list(EAGER),
                        help="the checks whose open records count (default: %(default)s)")
    parser.add_argument("--results", metavar="DIR", help="a finished campaign's work directory (corpus/, report/)")
    parser.add_argument("--plant", action="store_true",
                        help="run with bench/planted.py's two planted bugs among the targets, and say when each was found")
    parser.add_argument("--run-args", nargs=argparse.REMAINDER, default=[],
                        help="more arguments for fuzzdiff run")
    args = parser.parse_args(argv)

    work = Path(args.results) if args.results else Path(tempfile.mkdtemp(prefix="fuzzdiff-campaign-"))
    wall = None
    if not args.results:
        run = ["run", "--budget", str(args.budget), "--seed", str(args.seed), "--corpus", str(work / "corpus"),
               "--report", str(work / "report"), *args.run_args]
        command = [sys.executable, "-m", "fuzzdiff.cli", *run]
        if args.plant:  # the planted targets registered first, in the process that selects the pairs
            command = [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); import bench.planted; "
                       f"from fuzzdiff.cli import main; sys.exit(main({run!r}))"]
        print("$", " ".join(command[1:]), flush=True)
        t0 = time.monotonic()
        # the run's live display goes to the terminal; its table and findings to a log
        with open(work / "run.log", "w") as log:
            subprocess.run(command, stdout=log, cwd=work)
        wall = time.monotonic() - t0
    results = json.loads((work / "report" / "results.json").read_text())
    meta, pairs = results["meta"], results["pairs"]

    def covered(rows):
        return sum(1 for p in rows if p.get("batches", 0) > 0), len(rows)

    examples = sum(p["examples"] for p in pairs)
    print(f"work directory: {work}")
    print(f"budget {meta['budget']}s, seed {meta['seed']}, {meta['jobs']} workers, {meta['rounds']} round(s), "
          f"{meta['batches']} batches, campaign {meta['seconds']}s" + (f", wall {wall:.0f}s" if wall else ""))
    by_family = {}
    for p in pairs:
        by_family.setdefault(family(p), []).append(p)
    for name, rows in sorted(by_family.items()):
        done, total = covered(rows)
        eager_done, eager_total = covered([p for p in rows if p["check"] not in COMPILING])
        print(f"coverage {name}: {done}/{total} pairs ({100 * done / max(total, 1):.1f}%); "
              f"not compiling {eager_done}/{eager_total} ({100 * eager_done / max(eager_total, 1):.1f}%)")
    eager_done, eager_total = covered([p for p in pairs if p["check"] not in COMPILING])
    print(f"coverage of the pairs that do not compile: {eager_done}/{eager_total} "
          f"({100 * eager_done / max(eager_total, 1):.1f}%)")
    print(f"examples: {examples}, {examples / max(meta['seconds'], 1e-9):.0f} examples/s")
    known, new = root_causes(pairs)
    print(f"distinct root causes hit: {len(known) + len(new)} ({len(known)} known signatures matched, "
          f"{len(new)} new failures)")
    for name in ("modules", "distributions"):
        k, n = root_causes([p for p in pairs if family(p) == name])
        print(f"  of {name} targets: {len(k) + len(n)} ({len(k)} known, {len(n)} new)")
    if args.plant:
        for p in pairs:
            if p.get("ref", "").startswith("bench.planted:") and (p.get("failed") or p.get("known")):
                print(f"planted bug found: {p['target']} {p['check']} at {p.get('found_at') or 0:.0f}s: "
                      f"{str(p.get('message', ''))[:160]}")
        missed = {p["target"] for p in pairs if p.get("ref", "").startswith("bench.planted:")} - {
            p["target"] for p in pairs if p.get("ref", "").startswith("bench.planted:") and p.get("failed")}
        print(f"planted bugs missed: {', '.join(sorted(missed)) or 'none'}")
    empty = sorted({p["target"] for p in pairs if drew_nothing(p)})
    if empty:
        print(f"targets whose every draw was rejected (not counted): {', '.join(empty)}")
    if meta.get("narrowed_tours"):
        print(f"first tours the pace narrowed (round 1 slower than its plan): {meta['narrowed_tours']}")
    peaks = meta.get("worker_peak_mb") or {}
    if peaks:
        print("worker peak resident memory (MiB, by slot): "
              + ", ".join(f"{k}: {v:.0f}" for k, v in peaks.items()) + f"; max {max(peaks.values()):.0f}")
    ran = [p for p in pairs if p.get("batches", 0) > 0]
    print(f"\nlayout classes met in a pair's first batch (of {len(ran)} pairs that ran):")
    met = Counter(c for p in ran for c in p.get("layout_classes", ()))
    print("  " + ", ".join(f"{c} {met[c]}" for c in TOUR))
    print("\nworker time by check (what a plan of the budget needs):")
    print(f"  {'check':10s} {'pairs':>6s} {'batches':>8s} {'s/batch':>8s} {'ms/example':>10s} {'share':>6s}")
    busy = sum(p["seconds"] for p in pairs) or 1e-9
    for check, rows in sorted(by_check(pairs).items(), key=lambda kv: -sum(p["seconds"] for p in kv[1])):
        ran = [p for p in rows if p.get("batches", 0) > 0]
        batches, seconds = sum(p["batches"] for p in ran), sum(p["seconds"] for p in ran)
        runs = sum(p["examples"] for p in ran)
        print(f"  {check:10s} {len(ran):6d} {batches:8d} {seconds / max(batches, 1):8.2f} "
              f"{1000 * seconds / max(runs, 1):10.1f} {100 * seconds / busy:5.1f}%")

    found = {}
    for p in pairs:
        if p["failed"] or p.get("known"):
            found[(p.get("ref") or p["target"], p["check"])] = p.get("found_at")
    records = open_records(ROOT / "corpus", set(args.checks))
    keys = sorted({(r["target"], r["check"]) for r in records})
    hit = [k for k in keys if k in found]
    print(f"\nopen CPU records of {', '.join(args.checks)}: {len(records)} records, {len(keys)} (target, check) pairs")
    for key in keys:
        at = found.get(key, "missing")
        mark = "found" if key in found else "MISSED"
        print(f"  {mark:6s} {key[1]:10s} {key[0]:32s} " + (f"first failure at {at:.0f}s" if isinstance(at, float) else ""))
    print(f"rediscovered: {len(hit)}/{len(keys)} pairs ({100 * len(hit) / max(len(keys), 1):.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
