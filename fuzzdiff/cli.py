"""The ``fuzzdiff`` command (DESIGN.md section 5).

Exit status: 0 no failure, 1 failures found, 2 usage or input error.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
import time

__all__ = ["main"]


class UsageError(Exception):
    """Bad input from the command line: exit status 2, a message, no traceback."""


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [p for v in values for p in v.split(",") if p]


def _select_pairs(args):
    from fuzzdiff.checks import CHECKS
    from fuzzdiff.targets import all_targets

    checks = _split(args.checks) or list(CHECKS)
    unknown = [c for c in checks if c not in CHECKS]
    if unknown:
        raise UsageError(f"unknown check(s) {', '.join(unknown)}; expected {', '.join(CHECKS)}")
    patterns = _split(args.targets) or ["*"]
    targets = [t for t in all_targets() if any(fnmatch.fnmatchcase(t.name, p) or
                                               fnmatch.fnmatchcase(f"{t.family}/{t.name}", p)
                                               for p in patterns)]
    if not targets:
        raise UsageError(f"no target matches {', '.join(patterns)}; see 'fuzzdiff list'")
    return [(t, CHECKS[c]) for c in checks for t in targets if CHECKS[c].why_not(t) is None]


def cmd_run(args) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from fuzzdiff.campaign import run_campaign

    if args.max_examples < 1:
        raise UsageError("--max-examples must be at least 1")
    if args.budget is not None and args.budget <= 0:
        raise UsageError("--budget must be positive")
    pairs = _select_pairs(args)
    if args.corpus is None:
        from fuzzdiff.corpus import default_root
        args.corpus = default_root()
    console = Console(stderr=True)
    console.print(f"fuzzdiff run: {len(pairs)} (target, check) pairs, {args.max_examples} examples each"
                  + (f", budget {args.budget:g}s" if args.budget else ""))
    failures = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=not console.is_terminal) as bar:
        task = bar.add_task("fuzzing", total=len(pairs))

        def on_result(r):
            bar.update(task, advance=1, description=f"{r.check:>9} {r.target}")
            if r.failure or r.error:
                failures.append(r)
                bar.console.print(f"[red]FAIL[/red] {r.check} {r.target}: "
                                  f"{r.error or r.failure.verdict.message}")

        campaign = run_campaign(pairs, max_examples=args.max_examples, budget=args.budget,
                                seed=args.seed, corpus=args.corpus, on_result=on_result)

    table = Table(title="fuzzdiff run")
    for col in ("check", "targets", "examples", "passed", "failed", "unsupported", "inconclusive", "errors"):
        table.add_column(col, justify="left" if col == "check" else "right")
    for check, row in campaign.per_check().items():
        table.add_row(check, *(str(row[k]) for k in ("targets", "examples", "pass", "fail",
                                                     "unsupported", "inconclusive", "errors")))
    Console(width=max(Console().width, 110)).print(table)
    if campaign.skipped_for_budget:
        console.print(f"budget reached: {campaign.skipped_for_budget} pairs not started")
    for r in campaign.failures:
        print(f"\n{r.check} {r.target}: {r.error or r.failure.verdict.message}")
        if r.failure is not None:
            print(f"  case: {json.dumps(r.failure.case.to_json(), sort_keys=True)}")
            if r.failure.record_path:
                state = "new record" if r.failure.record_created else "already recorded"
                print(f"  {state}: {r.failure.record_path}")
    return 1 if campaign.failures else 0


def cmd_list(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from fuzzdiff.checks import CHECKS
    from fuzzdiff.targets import all_targets

    table = Table(title="targets x checks (+ applies, - does not, k known discrepancy)")
    table.add_column("family")
    table.add_column("target")
    for c in CHECKS:
        table.add_column(c, justify="center")
    families: dict[str, int] = {}
    for t in all_targets():
        families[t.family] = families.get(t.family, 0) + 1
        marks = ["k" if c in t.known else "-" if CHECKS[c].why_not(t) else "+" for c in CHECKS]
        table.add_row(t.family, t.name, *marks)
    console = Console()
    console.print(table)
    console.print("targets per family: " + ", ".join(f"{f} {n}" for f, n in sorted(families.items()))
                  + f"; total {sum(families.values())}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fuzzdiff", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="fuzz catalog targets x checks within a budget")
    run.add_argument("--checks", nargs="+", metavar="CHECK", help="checks to run (default: all)")
    run.add_argument("--targets", nargs="+", metavar="PATTERN",
                     help="glob patterns over target names or family/name (default: all)")
    run.add_argument("--budget", type=float, metavar="SECONDS",
                     help="stop starting new pairs after this many seconds")
    run.add_argument("--max-examples", type=int, default=20, metavar="N",
                     help="examples per (target, check) pair (default: 20)")
    run.add_argument("--seed", type=int, help="make the campaign reproducible")
    run.add_argument("--corpus", metavar="DIR", default=None,
                     help="write each shrunk failure as a record under DIR (default: $FUZZDIFF_CORPUS "
                          "or ./corpus)")
    run.set_defaults(func=cmd_run)

    lst = sub.add_parser("list", help="targets x checks that apply")
    lst.set_defaults(func=cmd_list)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UsageError as e:
        print(f"fuzzdiff: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fuzzdiff: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
