"""What one ``fuzzdiff.check`` call found: its ``Report``, each ``Failure`` with
its repro, the checks whose answer rests on few cases (``Thin``), and the
summary a person reads (docs/pages/design.md, contract 3)."""

from __future__ import annotations

import io
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from rich.console import Console
from rich.table import Table

from fuzzdiff.case.case import Case
from fuzzdiff.case.spec import bounded_below
from fuzzdiff.search.blame import Blame
from fuzzdiff.search.outcome import DOMAIN, FuzzFailure, Tally
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import FAILED

__all__ = ["Report", "Failure", "Thin", "COLUMNS", "THIN"]

# summary() columns: (header, row key). "judged" are the drawn cases (structures)
# with an answer; each ran at several value variants: its "runs", passed, failed,
# known (a known discrepancy) or inconclusive. Apart from them: "rejected" draws,
# inputs outside the function's domain (it raises there, or invalid= says so),
# and "unsupported" runs, which the check cannot apply to.
COLUMNS = (
    ("judged", "cases"),
    ("runs", "runs"),
    ("passed", "passed"),
    ("failed", "failed"),
    ("known", "known"),
    ("inconclusive", "inconclusive"),
    ("rejected", "rejected"),
    ("unsupported", "unsupported"),
)
# A check that judged fewer cases than this (and found no failure) is thin:
# its pass says little, and the report says why it judged so few.
THIN = 10


class Thin(NamedTuple):
    """A check that judged fewer than THIN cases: how many, and why.

    ``reason``: "not reached" (not started: no time was left of the budget),
    "cut" (the time budget stopped it), "rejected" (most draws lay outside
    the function's domain), "unsupported" (most runs were) or "few" (its
    search drew no more: max_examples); ``why`` in words."""

    cases: int
    reason: str
    why: str


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
    """What a ``fuzzdiff.check`` call found, per check (``tallies``,
    ``seconds``) and in all (``failures``, ``ok``; ``summary()`` for a person).

    ``thin``: the checks that judged fewer than THIN cases, each with why
    (``Thin``); a thin pass is no failure, but it says little. ``unconfirmed``:
    failures found whose rerun in a fresh process the time budget ended
    before, so not reported as failures (``Failure.elsewhere`` says so).
    ``reach``: for a check the budget did not reach, the smallest budget (in
    seconds) that would have started it, at the costs the others measured
    (None: none up to an hour). ``randomness_unasked``: why the function was not asked
    whether it draws random numbers, where asking ran out of time.
    ``unreached``: why the checks of a module's parameters say nothing, where
    the drawn parameters never reach its outputs
    (fuzzdiff.search.unreached_parameters). ``dtypes_left_out``: the dtypes
    not drawn because the function's plain call refuses them, and why
    (fuzzdiff.search.refused_dtypes)."""

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
    max_examples: int | None = None  # drawn cases per check the caller asked for (None: the default)
    unconfirmed: list[Failure] = field(default_factory=list)
    known: list[Failure] = field(default_factory=list)  # torch's known discrepancies the code reached
    reach: dict[str, int | None] = field(default_factory=dict)
    randomness_unasked: str = ""
    unreached: str = ""
    dtypes_left_out: str = ""

    def add_failure(self, check: str, failure: FuzzFailure, message: str | None = None, known: bool = False) -> None:
        """A failure; with ``known``, torch's known discrepancy that the code
        reached (fuzzdiff.search.blame.known_reached): kept in ``known``, not a failure."""
        (self.known if known else self.failures).append(
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

    def add_unconfirmed(self, check: str, failure: FuzzFailure) -> None:
        self.unconfirmed.append(
            Failure(
                check,
                failure.verdict.message,
                None,
                failure.case,
                failure.shrink_cut,
                elsewhere=f"not confirmed: {failure.unconfirmed}",
            )
        )

    def row(self, check: str) -> dict[str, int]:
        """A check's counts: judged ``cases`` and their ``runs`` (passed,
        failed, known, inconclusive), ``rejected`` draws, ``unsupported`` runs;
        ``examples``: every run with a verdict, unsupported ones included."""
        tally = self.tallies[check]
        counts = tally.counts
        failed = sum(counts[k] for k in FAILED)
        return {
            "cases": tally.cases,
            "runs": tally.judged,
            "examples": tally.examples,
            "passed": counts["pass"],
            "failed": failed,
            "known": counts["known"],
            "unsupported": counts["unsupported"],
            "inconclusive": counts["inconclusive"],
            "rejected": tally.rejected,
        }

    @property
    def thin(self) -> dict[str, Thin]:
        """The checks that judged fewer than THIN cases, with why; not one
        that found a failure (that is its answer), nor one that cannot apply
        at all (unsupported)."""
        failed = {f.check for f in self.failures}
        out: dict[str, Thin] = {}
        for name, tally in self.tallies.items():
            if tally.cases < THIN and name not in failed and not tally.only_unsupported:
                out[name] = self._thin(name, tally)
        return out

    def _thin(self, name: str, tally: Tally) -> Thin:
        if tally.cut and not tally.drawn:
            why = tally.cut_reason or "no time was left for it"
            return Thin(0, "not reached", f"not started within {self._budget()}: {why}{self._reaching(name)}")
        if tally.rejected > tally.cases:
            why = f"{tally.rejected} draws rejected as outside the function's domain, {tally.cases} judged"
            return Thin(tally.cases, "rejected", why)
        if tally.cut:
            return Thin(tally.cases, "cut", f"cut by the time budget: {tally.cut_reason or 'its share was spent'}")
        if tally.counts["unsupported"] > tally.judged:
            reason = tally.reasons.get("unsupported", "")
            return Thin(tally.cases, "unsupported", f"{tally.counts['unsupported']} runs unsupported: {reason}")
        asked = "" if self.max_examples is None else f" (max_examples={self.max_examples})"
        return Thin(tally.cases, "few", f"its search ended after {tally.cases} judged case(s){asked}")

    def summary(self) -> str:
        """Per check: judged cases and their runs (passed, failed, known,
        inconclusive), rejected draws, unsupported runs, seconds; then the thin
        checks and why, warnings, and each failure with its repro."""
        table = Table(title=f"fuzzdiff.check {self.target.name} ({self.target.spec})")
        table.add_column("check")
        for header, _ in COLUMNS:
            table.add_column(header, justify="right")
        table.add_column("seconds", justify="right")
        for name in self.tallies:
            row = self.row(name)
            table.add_row(name, *(str(row[key]) for _, key in COLUMNS), f"{self.seconds.get(name, 0.0):.1f}")
        out = io.StringIO()
        console = Console(file=out, width=110, no_color=True, highlight=False, emoji=False, markup=False)
        console.print(table)
        if self.tolerances:
            console.print(f"tolerances declared: {self.tolerances}")
        for line in self._thin_lines():
            console.print(line, soft_wrap=True)
        if self.randomness_unasked:
            console.print(f"{self.target.name}: {self.randomness_unasked}", soft_wrap=True)
        if self.unreached:
            console.print(f"{self.target.name}: {self.unreached}", soft_wrap=True)
        if self.dtypes_left_out:
            console.print(f"{self.target.name}: {self.dtypes_left_out}", soft_wrap=True)
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
        rejected, advice = self._rejected()
        said = False
        for f in self.failures:
            text = _failure_text(f)
            if f.check == DOMAIN and not said:  # the rejects since, and the advice: once
                text += "".join(f"\n  {line}" for line in (rejected, advice) if line)
                said = True
            console.print(text, soft_wrap=True)
        if not said:
            for line in (rejected, advice):
                if line:
                    console.print(line, soft_wrap=True)
        for f in self.unconfirmed:
            console.print(_failure_text(f, "NOT CONFIRMED"), soft_wrap=True)
        for f in self.known:
            console.print(_failure_text(f, "KNOWN"), soft_wrap=True)
        return out.getvalue()

    def _thin_lines(self) -> list[str]:
        """The checks the budget cut that judged enough all the same, a line
        per thin check, and one per group of checks not reached for one reason."""
        thin = self.thin
        cut = [f"{name} ({t.cases} cases judged)" for name, t in self.tallies.items() if t.cut and name not in thin]
        lines = [f"{self._budget()} cut short {', '.join(cut)} (budget= gives more time)"] if cut else []
        unreached: dict[str, list[str]] = {}
        for name, few in thin.items():
            if few.reason == "not reached":
                unreached.setdefault(self.tallies[name].cut_reason, []).append(name)
                continue
            judged = f"{few.cases} case{'s' if few.cases != 1 else ''}"
            lines.append(f"thin: {name} judged {judged} (fewer than {THIN}): {few.why}")
        for reason, names in unreached.items():
            words = (reason or "no time was left for it") + self._reaching(names[-1])
            if len(names) > 1:
                words = words.replace(" for it", " for them").replace(" reach it", " reach them")
            lines.append(f"{', '.join(names)} did not run (not reached) within {self._budget()}: {words}")
        return lines

    def _reaching(self, name: str) -> str:
        """The budget that would reach a check not reached (the last of a group: then all of them)."""
        if name not in self.reach:
            return ""
        budget = self.reach[name]
        return f"; budget={budget} would reach it" if budget else "; no budget up to an hour would reach it"

    def _budget(self) -> str:
        return "the time budget" if self.budget is None else f"the {self.budget:g} s budget"

    def _rejected(self) -> tuple[str, str]:
        """The rejected draws of all checks, in a line, and the spec bound
        that draws none of them, where every one had a dim at size 0 that
        no judged case had at 0."""
        total = sum(t.rejected for t in self.tallies.values())
        if not total:
            return "", ""
        line = (
            f"rejected since: {total} draw(s) across the checks, inputs outside the function's domain "
            "(not counted as failures)"
        )
        empty: Counter = Counter()
        judged: set[str] = set()
        for tally in self.tallies.values():
            empty.update(tally.rejected_empty)
            judged |= tally.judged_empty
        names = sorted(set().union(*empty) - judged)
        if not names or any(not set(key) & set(names) for key in empty):
            return line, ""
        at = " or ".join(names)
        if "_" in names:
            sizes = f"sizes=(1, {self.target.max_side})"
            return line, f"advice: {sizes} draws none of them (every one had a dim at size 0 that no judged case had)"
        spec = bounded_below(self.target.spec, names)
        return line, f'advice: the spec "{spec}" draws none of them (every one had {at} at size 0)'

    def warning(self) -> str:
        """What a passing call leaves unsaid by ``ok``: its thin checks and
        unconfirmed failures, in a line each ("" where there are none)."""
        lines = self._thin_lines()
        lines += [f"NOT CONFIRMED {f.check}: {f.message[:200]} ({f.elsewhere})" for f in self.unconfirmed]
        lines += [self.unreached] if self.unreached else []
        lines += [self.dtypes_left_out] if self.dtypes_left_out else []
        if not lines:
            return ""
        return f"fuzzdiff.check {self.target.name}: " + "\n  ".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _failure_text(f: Failure, word: str = "FAILED") -> str:
    whose = f" ({f.blame.headline})" if f.blame is not None else ""
    lines = [f"{word} {f.check}{whose}: {f.message}"]
    if f.blame is not None:
        where = f.blame.where
        lines.append(f"  whose: {where}: {f.blame.evidence}" if where else f"  whose: {f.blame.evidence}")
        if f.blame.script is not None:
            shown = f"fuzzdiff repro --script {f.record_path}" if f.record_path is not None else "Failure.blame.script"
            lines.append(f"  minimal repro: a few lines of torch that fail at {f.blame.op} ({shown})")
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
