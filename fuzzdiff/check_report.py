"""What one ``fuzzdiff.check`` call found: its ``Report``, each ``Failure`` with
its repro, and the summary a person reads (docs/pages/design.md, contract 3)."""

from __future__ import annotations

import io
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from fuzzdiff.blame import Blame
from fuzzdiff.case import Case
from fuzzdiff.outcome import FuzzFailure, Tally
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import FAILED

__all__ = ["Report", "Failure", "COLUMNS"]

# summary() columns: (header, row key). "runs" are check runs (verdicts): each drawn
# case runs at several value variants; "cases" are the drawn cases (structures).
COLUMNS = (
    ("cases", "cases"),
    ("runs", "examples"),
    ("passed", "passed"),
    ("failed", "failed"),
    ("known", "known"),
    ("unsupported", "unsupported"),
    ("inconclusive", "inconclusive"),
)


@dataclass(frozen=True)
class Failure:
    check: str
    message: str
    record_path: Path | None
    case: Case
    shrink_cut: bool = False  # shrinking stopped at its time bound: the case may not be minimal
    blame: Blame | None = None  # whose bug it is, PyTorch's or the code's, with the evidence
    elsewhere: str = ""  # how it was confirmed outside the run's process ("reproduced in a fresh process")

    @property
    def repro(self) -> str:
        """The command that replays it, or the case itself when nothing was recorded."""
        if self.record_path is not None:
            return f"fuzzdiff repro {self.record_path}"
        return f"case: {json.dumps(self.case.to_json(), sort_keys=True)}"


@dataclass
class Report:
    target: Target
    tallies: dict[str, Tally] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    warnings: Counter[str] = field(default_factory=Counter)  # warnings raised inside the runs, by text

    @property
    def ok(self) -> bool:
        return not self.failures

    tolerances: str = ""  # the tolerances the caller declared, as the summary shows them
    budget: float | None = None  # the call's time budget in seconds (None: no limit)
    logs: Counter[str] = field(default_factory=Counter)  # torch's log messages during the runs, by text

    def add_failure(self, check: str, failure: FuzzFailure, message: str | None = None) -> None:
        self.failures.append(
            Failure(
                check,
                failure.verdict.message if message is None else message,
                failure.record_path,
                failure.case,
                failure.shrink_cut,
                failure.blame,
                failure.elsewhere,
            )
        )

    def row(self, check: str) -> dict[str, int]:
        counts = self.tallies[check].counts
        failed = sum(counts[k] for k in FAILED)
        return {
            "cases": self.tallies[check].cases,
            "examples": self.tallies[check].examples,
            "passed": counts["pass"],
            "failed": failed,
            "known": counts["known"],
            "unsupported": counts["unsupported"],
            "inconclusive": counts["inconclusive"],
        }

    def summary(self) -> str:
        """Per check: drawn cases, runs (cases x variants), passed, failed, unsupported,
        inconclusive, seconds; then warnings, and each failure with its repro."""
        table = Table(title=f"fuzzdiff.check {self.target.name} ({self.target.spec})")
        table.add_column("check")
        for header, _ in COLUMNS:
            table.add_column(header, justify="right")
        table.add_column("seconds", justify="right")
        for name in self.tallies:
            row = self.row(name)
            table.add_row(name, *(str(row[key]) for _, key in COLUMNS), f"{self.seconds.get(name, 0.0):.1f}")
        out = io.StringIO()
        console = Console(file=out, width=110, no_color=True, highlight=False)
        console.print(table)
        if self.tolerances:
            console.print(f"tolerances declared: {self.tolerances}")
        cut = [f"{name} ({tally.cases} cases)" for name, tally in self.tallies.items() if tally.cut and tally.cases]
        unrun = [name for name, tally in self.tallies.items() if tally.cut and not tally.cases]
        if cut or unrun:
            said = [f"cut short {', '.join(cut)}"] if cut else []
            said += [f"not run {', '.join(unrun)}"] if unrun else []
            console.print(f"time budget {self.budget:g} s: {'; '.join(said)} (budget= gives more time)", soft_wrap=True)
        for name, tally in self.tallies.items():
            if tally.only_unsupported:
                console.print(f"{name} unsupported: {tally.reasons['unsupported']}")
            elif tally.counts["inconclusive"]:
                console.print(f"{name} inconclusive: {_reasons(tally, 'inconclusive')}", soft_wrap=True)
        for text, n in self.warnings.most_common():
            console.print(f"warning, {n} time(s) during the run: {text}", soft_wrap=True)
        for text, n in self.logs.most_common(5):
            console.print(f"torch logged, {n} time(s) during the run: {text}", soft_wrap=True)
        if len(self.logs) > 5:
            console.print(f"torch logged {len(self.logs) - 5} other message(s), {sum(self.logs.values())} in all")
        for f in self.failures:
            console.print(_failure_text(f), soft_wrap=True)
        return out.getvalue()

    def __str__(self) -> str:
        return self.summary()


def _failure_text(f: Failure) -> str:
    whose = f" ({f.blame.headline})" if f.blame is not None else ""
    lines = [f"FAILED {f.check}{whose}: {f.message}"]
    if f.blame is not None:
        lines.append(f"  whose: {f.blame.evidence}")
    if f.elsewhere:
        lines.append(f"  {f.elsewhere}")
    lines.append(f"  {f.repro}")
    if f.shrink_cut:
        lines.append("  (shrinking was cut short at its time bound: the case may not be minimal)")
    return "\n".join(lines)


def _reasons(tally: Tally, kind: str, most: int = 3) -> str:
    """A kind's counts by reason, the commonest first."""
    reasons = Counter({why: n for (k, why), n in tally.why.items() if k == kind})
    shown = [f"{n} x {why}" for why, n in reasons.most_common(most)]
    rest = sum(reasons.values()) - sum(n for _, n in reasons.most_common(most))
    if rest:
        shown.append(f"{rest} other")
    return f"{tally.counts[kind]} run(s): " + "; ".join(shown) if shown else str(tally.counts[kind])
