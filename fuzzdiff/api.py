"""``fuzzdiff.check`` and ``fuzzdiff.assert_ok``: fuzz the user's own code (docs/pages/design.md, contract 3)."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, Verbosity, reject, settings
from hypothesis.errors import InvalidArgument, Unsatisfiable
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fuzzdiff.case import Case
from fuzzdiff.checks import CHECKS, get_check
from fuzzdiff.config import FuzzConfig
from fuzzdiff.fuzzing import FuzzFailure, Tally, environ_config, fuzz
from fuzzdiff.random_probe import probed
from fuzzdiff.script.literals import ScriptError
from fuzzdiff.script.source import target_code
from fuzzdiff.targets.target import Target
from fuzzdiff.targets.user import definition, importable, module_definition, per_sample_target, user_target
from fuzzdiff.verdict import FAILED, Verdict
from strategies.layouts import check_layout_features

__all__ = ["check", "assert_ok", "Report", "Failure"]

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

    def add_failure(self, check: str, failure: FuzzFailure) -> None:
        self.tallies[check] = failure.tally or Tally()
        self.failures.append(
            Failure(check, failure.verdict.message, failure.record_path, failure.case, failure.shrink_cut)
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
        for name, tally in self.tallies.items():
            if tally.only_unsupported:
                console.print(f"{name} unsupported: {tally.reasons['unsupported']}")
        for text, n in self.warnings.most_common():
            console.print(f"warning, {n} time(s) during the run: {text}", soft_wrap=True)
        for f in self.failures:
            cut = "\n  (shrinking was cut short at its time bound: the case may not be minimal)" if f.shrink_cut else ""
            console.print(f"FAILED {f.check}: {f.message}\n  {f.repro}{cut}", soft_wrap=True)
        return out.getvalue()

    def __str__(self) -> str:
        return self.summary()


# Drawn cases per check. 100 at 2 variants answers a cheap function in about
# 3 s over the eager checks and 16 s with compile (bench/check.py); every
# self-test zoo bug is found within it, most at the first few cases.
MAX_EXAMPLES = 100
VARIANTS = 2  # value-and-probe variants per drawn case
SHRINK_SECONDS = 10.0  # per failure; the report says when shrinking was cut short


def _settings(max_examples: int, seed: int | None) -> settings:
    """Built from Hypothesis's own defaults, not from whatever profile the
    caller's session loaded; quiet: the report says what happened."""
    if not isinstance(max_examples, int) or max_examples < 1:
        raise ValueError(f"max_examples must be a positive integer, got {max_examples!r}")
    default = settings.get_profile("default")
    return settings(
        default,
        max_examples=max_examples,
        deadline=None,
        derandomize=False,
        database=None if seed is not None else default.database,
        phases=[p for p in Phase if p != Phase.explain],
        print_blob=False,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
    )


def _checks(checks: Iterable[str] | str | None) -> list[str]:
    if checks is None:
        return list(CHECKS)
    if isinstance(checks, str):
        checks = (checks,)
    names = list(checks)
    for name in names:
        get_check(name)  # UnknownCheck names the valid ones
    return names


def check(
    fn: Callable[..., Any] | Target,
    spec: str | None = None,
    checks: Iterable[str] | None = None,
    dtypes: Iterable[torch.dtype] = (torch.float64, torch.float32),
    domain: Mapping[str, tuple[float | None, float | None]] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    max_examples: int = MAX_EXAMPLES,
    seed: int | None = None,
    corpus: str | Path | None = None,
    *,
    variants: int = VARIANTS,
    shrink_seconds: float | None = SHRINK_SECONDS,
    sizes: tuple[int, int] | None = None,
    invalid: Iterable[type[BaseException]] = (),
    layouts: Iterable[str] | None = None,
    alias: bool = True,
    structured: Iterable[str] = (),
    progress: bool | None = None,
    config: FuzzConfig | None = None,
) -> Report:
    """Fuzz ``fn`` with every check that applies (or ``checks``); never raises for a failure.

    ``spec`` defaults to the function's jaxtyping annotations. A check that
    cannot apply (no forward-mode formula, no vmap rule) is "unsupported", not
    a failure. ``max_examples`` counts drawn cases per check, each run at
    ``variants`` value-and-probe variants; a check stops at its first
    confirmed failure, shrunk for at most ``shrink_seconds``. With ``corpus``
    each failure is written there as a record, and each example is journaled
    first, so a case that kills the process becomes a ``crash`` record.
    A function that raises in its plain call at some input is reported once,
    as an ``input-domain`` failure with that input, and the checks go on
    without such inputs; ``invalid`` (exception types) declares them outside
    its domain from the start.
    ``layouts`` narrows the memory layouts drawn (default: all of
    strategies.layouts.LAYOUT_FEATURES: permuted, sliced, offset, expanded
    (stride 0), channels_last; ``()``: contiguous only) and ``alias=False``
    turns off aliasing between arguments, for one run. ``structured`` opts
    into structured points where they are valid inputs (fuzzdiff.structures:
    "ties", "zeros", "identity", "diagonal", "repeated_singular", "large",
    "offset"), as a Target's ``structured`` field does.
    ``sizes`` is ``(smallest, largest)`` for every drawn dim (default 0 to 4;
    ``n>=1`` in the spec bounds one name). ``progress`` (default: when stderr
    is a terminal) shows the check running. A spec that does not parse or fit
    the function's signature is a ValueError before any fuzzing. ``config``
    (a FuzzConfig; default: the defaults under $FUZZDIFF_*) holds the run's
    other settings, such as the per-example timeout and compile backends; the
    arguments here take precedence over it.
    """
    config = FuzzConfig.resolve(base=config or environ_config(), variants=variants, structures=1, corpus=corpus)
    target = user_target(fn, spec, dtypes=dtypes, domain=domain, kwargs=kwargs, sizes=sizes)
    if structured:
        target = replace(target, structured=tuple(structured))  # validated by Target: a ValueError
    names = _checks(checks)
    hsettings = _settings(max_examples, seed)
    with warnings.catch_warnings(record=True) as probing:
        warnings.simplefilter("always")
        target = probed(target, config.timeout)  # a function that draws random numbers is checked seeded alike
    report = Report(target)
    recipe = _recipe(target, fn)
    outside = tuple(invalid)  # exceptions of the plain call that mean "not in the function's domain"
    drawn = _case_options(layouts, alias)

    def run(name: str) -> Tally:
        if not alias and CHECKS[name].aliasing == "required":
            tally = Tally()
            tally.add(Verdict("unsupported", "aliasing is switched off for this run (alias=False)"))
            return tally
        fuzzed = target
        if name == "per_sample" and isinstance(fn, torch.nn.Module):
            # per-sample gradients need the module itself, on one sample's shapes
            fuzzed = per_sample_target(target, fn)
        if outside:
            fuzzed = replace(fuzzed, fn=_rejecting(fuzzed.fn, outside))
        try:
            return fuzz(
                name,
                fuzzed,
                settings=hsettings,
                seed=seed,
                config=config,
                shrink_seconds=shrink_seconds,
                definition=recipe,
                **drawn,
            )
        except Unsatisfiable:
            tally = Tally()
            tally.add(
                Verdict(
                    "unsupported",
                    "every input drawn lies outside the function's domain "
                    f"(it raised {', '.join(e.__name__ for e in outside)})",
                )
            )
            return tally

    with _progress(progress, len(names)) as step, warnings.catch_warnings(record=True) as caught:
        # torch's warnings inside the runs (a vmap fallback warns on every call):
        # collected and summarized once in the report, not printed per run
        warnings.simplefilter("always")
        for name in names:
            step(name)
            start = time.perf_counter()
            try:
                report.tallies[name] = run(name)
            except FuzzFailure as failure:
                raised = _plain_call_error(target, failure.case)
                if raised is None:
                    report.add_failure(name, failure)
                else:
                    # the function itself raises here: one input-domain finding, not one per
                    # check; the checks then go on without inputs where it raises so
                    report.failures.append(
                        Failure(
                            DOMAIN,
                            f"the function raises {type(raised).__name__} at this input, in its "
                            f"plain call: {raised} (invalid=({type(raised).__name__},) declares such inputs "
                            "outside its domain)",
                            failure.record_path,
                            failure.case,
                            failure.shrink_cut,
                        )
                    )
                    outside += (type(raised),)
                    try:
                        report.tallies[name] = run(name)
                    except FuzzFailure as again:
                        report.add_failure(name, again)
            report.seconds[name] = time.perf_counter() - start
    report.warnings = Counter(
        f"{w.category.__name__}: {str(w.message).strip().splitlines()[0][:200]}"
        for w in [*probing, *caught]
        if not _torch_internal(w)
    )
    return report


DOMAIN = "input-domain"  # Failure.check of an input where the function itself raises


def _recipe(target: Target, fn: Callable[..., Any]) -> dict[str, Any] | None:
    """The record's recipe of a user target: its ``module:qualname``, or where
    that does not import back in a fresh process (a lambda, a local function,
    ``__main__``), its self-contained source; a module's, its recipe. Warns
    once when none works."""
    if isinstance(fn, torch.nn.Module):
        return module_definition(target, fn)
    if target.family != "user" or importable(target):
        return definition(target)
    try:
        code = target_code(fn, target.name, target.kwargs)
    except ScriptError as e:
        warnings.warn(
            f"fuzzdiff: records of {target.name!r} will not replay in another process: it is "
            f"not importable as module:qualname and its source cannot be stored ({e}); "
            "define it at module level of an importable module",
            stacklevel=3,
        )
        return None
    return definition(
        target,
        {
            "imports": list(code.imports),
            "setup": list(code.setup),
            "definitions": list(code.definitions),
            "call": code.call,
        },
    )


def _case_options(layouts: Iterable[str] | None, alias: bool) -> dict[str, Any]:

    options: dict[str, Any] = {}
    if layouts is not None:
        chosen = tuple(layouts)
        try:
            check_layout_features(chosen)
        except InvalidArgument as e:
            raise ValueError(str(e)) from None
        options["layout_features"] = chosen
    if not alias:
        options["alias"] = False
    return options


def _torch_internal(w: warnings.WarningMessage) -> bool:
    """A deprecation inside torch itself (``torch.jit.script`` on import paths
    the checks take): nothing the user's code did or can change."""
    return issubclass(w.category, DeprecationWarning) and f"{os.sep}torch{os.sep}" in (w.filename or "")


def _plain_call_error(target: Target, case: Case) -> Exception | None:
    """What the target's plain call raises at ``case``, without autograd (None: nothing)."""
    try:
        args = case.materialize(requires_grad=False).args
        with torch.no_grad():
            target(*args, **case.kwargs)
    except Exception as e:  # noqa: BLE001 - any exception of the user's function
        return e
    return None


def _rejecting(fn: Callable[..., Any], outside: tuple[type[BaseException], ...]) -> Callable[..., Any]:
    """``fn``, with its exceptions of the types in ``outside`` turned into a
    rejected example (Hypothesis draws another), not a failure."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except outside:
            reject()

    return call


@contextlib.contextmanager
def _progress(show: bool | None, total: int) -> Iterator[Callable[[str], None]]:
    """``step(check)`` for each check: a live line on a terminal, nothing elsewhere."""
    if show is None:
        show = sys.stderr.isatty()
    if not show:
        yield lambda name: None
        return
    with Progress(
        TextColumn("fuzzdiff.check {task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} checks"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("", total=total)
        started = [False]

        def step(name: str) -> None:
            if started[0]:
                bar.advance(task)
            started[0] = True
            bar.update(task, description=name)

        yield step


def assert_ok(fn: Callable[..., Any] | Target, spec: str | None = None, **options: Any) -> Report:
    """``check`` inside the user's own test: AssertionError with the shrunk repro on failure."""
    report = check(fn, spec, **options)
    if not report.ok:
        raise AssertionError("fuzzdiff found a failure:\n" + report.summary())
    return report
