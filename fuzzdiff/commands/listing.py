"""``fuzzdiff list``: the targets, and which checks apply to each."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from fuzzdiff.checks import CHECKS
from fuzzdiff.search.vmap_fallbacks import fallback_report
from fuzzdiff.targets import all_targets

__all__ = ["cmd_list"]


def cmd_list(args) -> int:
    targets = _listed_targets(args)
    console = Console(width=max(Console().width, 40 + 11 * len(CHECKS)))
    if not args.families:
        table = Table(title="targets x checks (+ applies, - does not, k known discrepancy)")
        table.add_column("family")
        table.add_column("target")
        for c in CHECKS:
            table.add_column(c, justify="center")
        for t in targets:
            marks = ["k" if c in t.known_checks() else "-" if CHECKS[c].why_not(t) else "+" for c in CHECKS]
            table.add_row(t.family, t.name, *marks)
        console.print(table)
    per_family = Table(title="targets per family, and how many of them each check applies to")
    per_family.add_column("family")
    per_family.add_column("targets", justify="right")
    for c in CHECKS:
        per_family.add_column(c, justify="right")
    families: dict[str, list] = {}
    for t in targets:
        families.setdefault(t.family, []).append(t)
    for family, members in sorted(families.items()):
        per_family.add_row(
            family, str(len(members)), *(str(sum(CHECKS[c].why_not(t) is None for t in members)) for c in CHECKS)
        )
    per_family.add_row(
        "all", str(len(targets)), *(str(sum(CHECKS[c].why_not(t) is None for t in targets)) for c in CHECKS)
    )
    console.print(per_family)
    if args.vmap_fallbacks:
        hits = {name: ops for name, ops in fallback_report(targets).items() if ops}
        console.print(f"vmap fallbacks (ops without a batching rule, run one example at a time): {len(hits)} targets")
        for name, ops in sorted(hits.items()):
            console.print(f"  {name}: {', '.join(ops)}")
    return 0


def _listed_targets(args):
    if args.opinfo:
        print(
            "building the OpInfo and ModuleInfo targets (imports torch's op_db and module_db; a minute or two)...",
            file=sys.stderr,
        )
    return all_targets(include_opinfo=args.opinfo)
