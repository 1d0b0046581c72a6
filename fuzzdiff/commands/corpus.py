"""``fuzzdiff corpus``: list, show, count, promote, replay and merge the corpus's records."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from fuzzdiff.commands.options import UsageError, allowed_imports, corpus_root, record_path
from fuzzdiff.corpus import repro
from fuzzdiff.corpus.causes import root_causes
from fuzzdiff.corpus.discrepancies_page import signatures
from fuzzdiff.corpus.replay import NEWS, mark_outcome, outcome
from fuzzdiff.record.files import iter_records, merge, read_record
from fuzzdiff.record.format import STATUSES, CorpusError
from fuzzdiff.targets.recipe import references

__all__ = [
    "cmd_corpus_list",
    "cmd_corpus_merge",
    "cmd_corpus_promote",
    "cmd_corpus_replay",
    "cmd_corpus_show",
    "cmd_corpus_stats",
]


def _records(args):
    good, bad = [], []
    for path in iter_records(corpus_root(args)):
        try:
            good.append(read_record(path))
        except CorpusError as e:
            bad.append(str(e))
    return good, bad


def cmd_corpus_list(args) -> int:
    records, bad = _records(args)
    table = Table(title=f"corpus {corpus_root(args)}: {len(records)} records")
    for col in ("id", "status", "check", "target", "dtype", "verdict"):
        table.add_column(col)
    for r in records:
        message = r.verdict.message.splitlines()[0] if r.verdict.message else ""
        table.add_row(r.id, r.status, r.check, r.target, r.case.dtype, f"{r.verdict.kind}: {message[:80]}")
    console = Console(width=max(Console().width, 140))
    console.print(table)
    for e in bad:
        console.print(f"[red]unreadable[/red] {e}")
    return 2 if bad else 0


def cmd_corpus_show(args) -> int:
    record = read_record(record_path(args, args.id))
    print(f"{record.path}")
    print(f"id:         {record.id}")
    print(f"status:     {record.status}")
    print(f"check:      {record.check}")
    print(f"target:     {record.target}")
    print(f"dtype:      {record.case.dtype} on {record.case.device}")
    print(f"verdict:    {record.verdict}")
    for key, value in sorted(record.verdict.errors.items()):
        if key != "traceback":
            print(f"            {key} = {value}")
    print("found with: " + ", ".join(f"{k} {v}" for k, v in (record.found_with or {}).items()))
    print("inputs:")
    for line in repro.describe(record.case):
        print(f"  {line}")
    if record.case.params:
        print(f"params:     {json.dumps(record.case.params, sort_keys=True)}")
    module = (record.definition or {}).get("module")
    if isinstance(module, dict):  # what replaying it builds, and imports
        call = {k: module.get(k) for k in ("class", "args", "kwargs")}
        print(f"module:     {json.dumps(call, sort_keys=True)}")
        print(f"imports:    {', '.join(references(module)) or 'torch only'}")
    print(f"replay:     fuzzdiff repro {record.path} [--script]")
    return 0


def cmd_corpus_stats(args) -> int:
    records, bad = _records(args)
    per_check: dict[str, Counter] = {}
    for r in records:
        per_check.setdefault(r.check, Counter())[r.status] += 1
        per_check[r.check]["targets:" + r.target] = 1
    table = Table(title=f"corpus {corpus_root(args)}")
    table.add_column("check")
    for col in (*STATUSES, "records", "targets"):
        table.add_column(col, justify="right")
    for check, c in sorted(per_check.items()):
        table.add_row(
            check,
            *(str(c[s]) for s in STATUSES),
            str(sum(c[s] for s in STATUSES)),
            str(sum(1 for k in c if k.startswith("targets:"))),
        )
    table.add_row(
        "all",
        *(str(sum(c[s] for c in per_check.values())) for s in STATUSES),
        str(len(records)),
        str(len({r.target for r in records})),
    )
    console = Console(width=max(Console().width, 140))
    console.print(table)
    _print_root_causes(console, [r for r in records if r.status_on() == "open"])
    for e in bad:
        console.print(f"[red]unreadable[/red] {e}")
    return 2 if bad else 0


def _print_root_causes(console: Console, records: list) -> None:
    """The open records' root causes (fuzzdiff.corpus.causes), the largest first."""
    # every declared signature, those no target lists too (the page's own list)
    causes = root_causes(records, [s.known for s in signatures()])
    kinds = Counter(c.kind for c in causes)
    by_known = sum(1 for c in causes if c.known is not None)
    console.print(
        f"{len(causes)} root causes of {len(records)} open records ({by_known} by a known signature, "
        f"{len(causes) - by_known} by an automatic one): " + ", ".join(f"{n} {k}" for k, n in kinds.most_common())
    )
    table = Table(show_header=True)
    for col in ("records", "kind", "root cause", "record ids"):
        table.add_column(col, justify="right" if col == "records" else "left")
    for c in causes:
        ids = ", ".join(r.id[:8] for r in c.records[:3]) + (" ..." if len(c.records) > 3 else "")
        table.add_row(str(len(c.records)), c.kind, ("known: " if c.known else "") + c.name, ids)
    console.print(table)


def cmd_corpus_promote(args) -> int:
    record = repro.read(record_path(args, args.id))  # writing the test imports nothing
    folder = Path(args.to)
    folder.mkdir(parents=True, exist_ok=True)
    name, source = repro.regression_test(record, folder, xfail=args.xfail)
    path = folder / name
    if path.exists() and not args.force:
        raise UsageError(f"{path} exists; pass --force to overwrite it")
    path.write_text(source)
    print(f"wrote {path}")
    if record.status == "open" and not args.xfail:
        print(
            "it fails until the bug is fixed; for an upstream bug you cannot fix, "
            "pass --xfail to make it a strict expected failure",
            file=sys.stderr,
        )
    return 0


def cmd_corpus_replay(args) -> int:
    """Each record replayed on this torch, a line each as it is done, then the counts."""
    records, bad = _records(args)
    if args.status:
        records = [r for r in records if r.status == args.status]
    allowed = allowed_imports(args)
    print(f"replaying {len(records)} records of {corpus_root(args)} on torch {torch.__version__}", flush=True)
    counts: Counter = Counter()
    for record in records:
        found = outcome(record, trust_source=args.trust_source, allow_import=allowed)
        counts[found.kind] += 1
        marked = mark_outcome(record, found) if args.mark else None
        detail = f"  ({found.detail})" if found.detail else ""
        note = f"  -> {marked}" if marked else ""
        print(f"{found.kind:<17} {record.check}/{record.target} {record.id}{detail[:200]}{note}", flush=True)
    print("; ".join(f"{n} {kind}" for kind, n in counts.most_common()) or "no records")
    for e in bad:
        print(f"unreadable: {e}", file=sys.stderr)
    return 2 if bad else 1 if any(counts[k] for k in NEWS) else 0


def cmd_corpus_merge(args) -> int:
    dest = corpus_root(args)
    result = merge(args.sources, dest)
    print(f"merged into {dest}: {len(result.added)} new records, {len(result.present)} already present")
    for path, ours, theirs in result.status_differs:
        print(f"  {path}: status {ours!r} kept (a source says {theirs!r})")
    for message in result.unreadable:
        print(f"  skipped unreadable {message}", file=sys.stderr)
    return 2 if result.unreadable else 0
