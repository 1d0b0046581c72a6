"""``fuzzdiff.check`` and ``fuzzdiff.assert_ok``: fuzz the user's own code (DESIGN.md section 3)."""

from __future__ import annotations

import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import torch
from hypothesis import HealthCheck, Phase, settings

from fuzzdiff.case import Case
from fuzzdiff.checks import CHECKS, get_check
from fuzzdiff.fuzzing import FuzzFailure, Tally, fuzz
from fuzzdiff.targets.target import Target
from fuzzdiff.targets.user import definition, per_sample_target, user_target

__all__ = ["check", "assert_ok", "Report", "Failure"]

COLUMNS = ("examples", "passed", "failed", "unsupported", "inconclusive")


@dataclass(frozen=True)
class Failure:
    check: str
    message: str
    record_path: Path | None
    case: Case

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

    @property
    def ok(self) -> bool:
        return not self.failures

    def row(self, check: str) -> dict[str, int]:
        counts = self.tallies[check].counts
        failed = sum(counts[k] for k in counts if k not in ("pass", "unsupported", "inconclusive"))
        return {"examples": self.tallies[check].examples, "passed": counts["pass"], "failed": failed,
                "unsupported": counts["unsupported"], "inconclusive": counts["inconclusive"]}

    def summary(self) -> str:
        """Per check: examples run, passed, failed, unsupported; then each failure and its repro."""
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"fuzzdiff.check {self.target.name} ({self.target.spec})")
        table.add_column("check")
        for col in (*COLUMNS, "seconds"):
            table.add_column(col, justify="right")
        for name in self.tallies:
            row = self.row(name)
            table.add_row(name, *(str(row[c]) for c in COLUMNS), f"{self.seconds.get(name, 0.0):.1f}")
        out = io.StringIO()
        console = Console(file=out, width=110, no_color=True, highlight=False)
        console.print(table)
        for name, tally in self.tallies.items():
            if tally.only_unsupported:
                console.print(f"{name} unsupported: {tally.reasons['unsupported']}")
        for f in self.failures:
            console.print(f"FAILED {f.check}: {f.message}\n  {f.repro}", soft_wrap=True)
        return out.getvalue()

    def __str__(self) -> str:
        return self.summary()


def _settings(max_examples: int, seed: int | None) -> settings:
    if not isinstance(max_examples, int) or max_examples < 1:
        raise ValueError(f"max_examples must be a positive integer, got {max_examples!r}")
    return settings(max_examples=max_examples, deadline=None, derandomize=False,
                    database=None if seed is not None else settings.default.database,
                    phases=[p for p in Phase if p != Phase.explain],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


def _checks(checks: Iterable[str] | str | None) -> list[str]:
    if checks is None:
        return list(CHECKS)
    if isinstance(checks, str):
        checks = (checks,)
    names = list(checks)
    for name in names:
        get_check(name)  # UnknownCheck names the valid ones
    return names


def check(fn: Callable | Target, spec: str | None = None, checks: Iterable[str] | None = None,
          dtypes: Iterable[torch.dtype] = (torch.float64, torch.float32),
          domain: Mapping[str, tuple[float | None, float | None]] | None = None,
          kwargs: Mapping[str, Any] | None = None, max_examples: int = 200, seed: int | None = None,
          corpus: str | Path | None = None) -> Report:
    """Fuzz ``fn`` with every check that applies (or ``checks``); never raises for a failure.

    ``spec`` defaults to the function's jaxtyping annotations. A check that
    cannot apply (no forward-mode formula, no vmap rule) is "unsupported", not
    a failure.
    """
    target = user_target(fn, spec, dtypes=dtypes, domain=domain, kwargs=kwargs)
    names = _checks(checks)
    hsettings = _settings(max_examples, seed)
    report = Report(target)
    for name in names:
        start = time.perf_counter()
        try:
            fuzzed = target
            if name == "per_sample" and isinstance(fn, torch.nn.Module):
                # per-sample gradients need the module itself, on one sample's shapes
                fuzzed = per_sample_target(target, fn)
            report.tallies[name] = fuzz(name, fuzzed, settings=hsettings, seed=seed)
        except FuzzFailure as failure:
            report.tallies[name] = failure.tally or Tally()
            path = None
            if corpus is not None:
                from fuzzdiff.corpus import write_record
                path, _ = write_record(corpus, name, failure.case, failure.verdict,
                                       definition=definition(target))
            report.failures.append(Failure(name, failure.verdict.message, path, failure.case))
        report.seconds[name] = time.perf_counter() - start
    return report


def assert_ok(fn: Callable | Target, spec: str | None = None, **options) -> Report:
    """``check`` inside the user's own test: AssertionError with the shrunk repro on failure."""
    report = check(fn, spec, **options)
    if not report.ok:
        raise AssertionError("fuzzdiff found a failure:\n" + report.summary())
    return report
