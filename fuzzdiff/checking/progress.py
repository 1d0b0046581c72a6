"""``fuzzdiff.check``'s progress, shown while its checks run."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from fuzzdiff.checking.report import Report

__all__ = ["Shown", "showing"]


class Shown:
    """What the caller sees while the checks run: nothing, a line per finished
    check (stderr is not a terminal: a CI log, a pipe), or a live bar."""

    def __init__(self, target: str, lines: bool, bar: Progress | None = None, task: Any = None):
        self.target, self.lines, self.bar, self.task = target, lines, bar, task
        self.started = False

    def start(self, name: str) -> None:
        if self.bar is not None:
            if self.started:
                self.bar.advance(self.task)
            self.bar.update(self.task, description=name)
        self.started = True

    def done(self, name: str, report: Report) -> None:
        if not self.lines:
            return
        tally, row = report.tallies[name], report.row(name)
        outcome = ", ".join(f"{row[k]} {k}" for k in ("failed", "known", "inconclusive", "rejected") if row[k])
        if tally.only_unsupported:
            outcome = "unsupported"
        elif tally.cut and not tally.drawn:
            outcome = "not reached"
        thin = report.thin.get(name)
        said = f", thin ({thin.reason})" if thin is not None and thin.reason != "not reached" else ""
        print(
            f"fuzzdiff.check {self.target}: {name}: {tally.cases} cases judged, {outcome or 'passed'}{said}, "
            f"{report.seconds[name]:.1f} s" + (", cut by the time budget" if tally.cut and tally.drawn else ""),
            file=sys.stderr,
            flush=True,
        )


@contextlib.contextmanager
def showing(show: bool | None, names: Sequence[str], target: str) -> Iterator[Shown]:
    """A live bar on a terminal; elsewhere a line per finished check, unless ``show`` is False."""
    if show is False or (show is None and not sys.stderr.isatty()):
        yield Shown(target, lines=show is None)
        return
    with Progress(
        TextColumn("fuzzdiff.check {task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} checks"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        yield Shown(target, lines=False, bar=bar, task=bar.add_task("", total=len(names)))
