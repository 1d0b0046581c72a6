"""What ``fuzzdiff run`` shows: the live display while it runs, and its table,
coverage and per-node figures at the end (fuzzdiff.commands.run)."""

from __future__ import annotations

import time
from collections import Counter

from rich.console import Group
from rich.table import Table
from rich.text import Text

from fuzzdiff.targets.opinfo.adapter import FAMILY as OPINFO

__all__ = ["RUN_COLUMNS", "LiveView", "coverage_line", "nodes_line", "nodes_meta", "run_table"]


RUN_COLUMNS = (
    ("batches", "batches"),
    ("examples", "examples"),
    ("passed", "pass"),
    ("failed", "fail"),
    ("unsupported", "unsupported"),
    ("inconclusive", "inconclusive"),
    ("crashed", "crashed"),
    ("known", "known"),
    ("new records", "new records"),
    ("PyTorch's", "pytorch's"),
    ("yours", "yours"),
    ("localized", "localized"),  # failing pairs whose failure was localized: op, rule or composition
)


def run_table(campaign):
    covered, given = campaign.covered()
    table = Table(
        title=f"fuzzdiff run: {covered} of {given} pairs covered, {campaign.batches} batches "
        f"in {campaign.rounds} round(s), {campaign.seconds:.0f}s on {campaign.jobs} worker(s)"
    )
    table.add_column("check")
    table.add_column("coverage", justify="right")
    for title, _ in RUN_COLUMNS:
        table.add_column(title, justify="right")
    total: Counter[str] = Counter()
    for check, row in campaign.per_check().items():
        total.update(row)
        table.add_row(check, f"{row['targets']}/{row['applicable']}", *(str(row[k]) for _, k in RUN_COLUMNS))
    table.add_row(
        "all", f"{total['targets']}/{total['applicable']}", *(str(total[k]) for _, k in RUN_COLUMNS), style="bold"
    )
    return table


def coverage_line(campaign) -> str:
    """Pairs started of pairs given: the catalog's, then OpInfo's."""
    done, given = campaign.covered()
    opinfo = campaign.covered(OPINFO)
    line = f"catalog {done - opinfo[0]}/{given - opinfo[1]}"
    return line + (f", opinfo {opinfo[0]}/{opinfo[1]}" if opinfo[1] else "")


class LiveView:
    """The live display of ``fuzzdiff run``: the round, coverage per check,
    examples/s and failures so far, and what each worker runs."""

    def __init__(self, console, cluster: bool = False):
        self.console = console
        self.campaign = None
        self.started: float | None = None
        self.workers: dict[int, str] = {}
        self.failures = 0
        self.cluster = cluster  # and per node: its examples/s

    def on_start(self, slot, target, check):
        if self.started is None:
            self.started = time.monotonic()
        self.workers[slot] = "" if target is None else f"{check} {target}"

    def on_batch(self, campaign, pair, batch):
        self.campaign = campaign
        if batch.failed:
            self.failures += 1
            what = batch.error or batch.failure.verdict.message
            self.console.print(f"[red]FAIL[/red] {batch.check} {pair.target}: {what.splitlines()[0][:200]}")

    def __rich__(self):
        c = self.campaign
        if c is None:
            return Text("starting the workers...")
        seconds = max(time.monotonic() - (self.started or time.monotonic()), 1e-9)
        head = Text(
            f"round {c.rounds} | covered {coverage_line(c)} | {c.examples / seconds:.0f} examples/s "
            f"| {c.batches} batches | {self.failures} failing pair(s) | {seconds:.0f}s"
        )
        table = Table(box=None, pad_edge=False, show_header=True, header_style="dim")
        table.add_column("check")
        table.add_column("covered", justify="right")
        table.add_column("examples", justify="right")
        table.add_column("failed", justify="right")
        for check, row in c.per_check().items():
            table.add_row(
                check, f"{row['targets']}/{row['applicable']}", str(row["examples"]), str(row["fail"] + row["crashed"])
            )
        if self.cluster:  # hundreds of workers: their count, and each node's rate
            busy = sum(bool(w) for w in self.workers.values())
            lines = [Text(nodes_line(c, seconds)), Text(f"  {busy} of {c.jobs} workers busy", style="dim")]
        else:
            lines = [Text(f"  worker {k}: {w}", style="dim") for k, w in sorted(self.workers.items()) if w]
        return Group(head, table, *lines)


def nodes_line(campaign, seconds: float) -> str:
    """The node count and each node's examples/s (the cluster's share of the work)."""
    nodes = campaign.nodes
    each = ", ".join(f"{name} {n.examples / max(seconds, 1e-9):.0f}" for name, n in sorted(nodes.items()))
    return f"{len(nodes)} node(s), examples/s per node: {each}"


def nodes_meta(campaign) -> dict:
    """The per-node breakdown of a --ray run's report."""
    seconds = max(campaign.seconds, 1e-9)
    return {
        name: {
            "workers": n.slots,
            "batches": n.batches,
            "examples": n.examples,
            "busy_seconds": round(n.seconds, 1),
            "examples_per_s": round(n.examples / seconds, 1),
        }
        for name, n in sorted(campaign.nodes.items())
    }
