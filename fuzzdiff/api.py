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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, Verbosity, reject, settings
from hypothesis.errors import InvalidArgument, Unsatisfiable
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from torch.utils._pytree import tree_leaves

from fuzzdiff import torch_state
from fuzzdiff.blame import Blame
from fuzzdiff.case import Case
from fuzzdiff.checks import CHECKS, get_check
from fuzzdiff.config import FuzzConfig
from fuzzdiff.costs import example_cost
from fuzzdiff.fresh import FreshProcess
from fuzzdiff.fuzzing import FuzzFailure, Tally, fuzz
from fuzzdiff.journal import Journal
from fuzzdiff.known import Known
from fuzzdiff.random_probe import probed
from fuzzdiff.root_cause import message_pattern, root_cause
from fuzzdiff.script.literals import ScriptError
from fuzzdiff.script.source import target_code
from fuzzdiff.structures import STRUCTURES
from fuzzdiff.targets.target import Target, Tol
from fuzzdiff.targets.user import definition, importable, module_definition, per_sample_target, user_target
from fuzzdiff.torch_logs import torch_logs
from fuzzdiff.verdict import FAILED, Verdict
from strategies.layouts import check_layout_features

__all__ = ["check", "assert_ok", "Report", "Failure", "declared_tolerances", "hard_values"]

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


# Drawn cases per check. 100 at 2 variants answers a cheap function in about
# 3 s over the eager checks and 16 s with compile (bench/check.py); every
# self-test zoo bug is found within it, most at the first few cases.
MAX_EXAMPLES = 100
BUDGET = 30.0  # seconds a call answers in by default (2 cores), unless max_examples is given
# A check's share of the time left is in proportion to its cost of an example
# (fuzzdiff.costs) relative to grad's, between 1 and MAX_WEIGHT: compile and
# forward2 get more time than grad, never the whole call.
MAX_WEIGHT = 4.0
MIN_SHRINK = 2.0  # seconds of shrinking a failure gets, even past its check's share of the budget
# The part of the budget the checks' shares leave for what follows a check's
# last case: a failure's replay in a fresh process and its root cause, the
# last case of a check that ran past its share, the report.
WRAP_UP = 0.1
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
    max_examples: int | None = None,
    seed: int | None = None,
    corpus: str | Path | None = None,
    *,
    budget: float | None = None,
    variants: int = VARIANTS,
    shrink_seconds: float | None = SHRINK_SECONDS,
    sizes: tuple[int, int] | None = None,
    invalid: Iterable[type[BaseException]] = (),
    layouts: Iterable[str] | None = None,
    alias: bool = True,
    structured: Iterable[str] | None = None,
    progress: bool | None = None,
    config: FuzzConfig | None = None,
    rtol: float | Mapping[str, float] | None = None,
    atol: float | Mapping[str, float] | None = None,
    isolate: bool = True,
) -> Report:
    """Fuzz ``fn`` with every check that applies (or ``checks``); never raises for a failure.

    ``spec`` defaults to the function's jaxtyping annotations. A check that
    cannot apply (no forward-mode formula, no vmap rule) is "unsupported", not
    a failure. ``max_examples`` (default 100) counts drawn cases per check,
    each run at ``variants`` value-and-probe variants; a check stops at its
    first confirmed failure, shrunk for at most ``shrink_seconds``.
    ``budget`` is the call's time in seconds (default 30, or no limit when
    ``max_examples`` is given; ``float("inf")``: none): each check, when it
    starts, gets a share of the time left in proportion to its cost, and ends
    at the first case past it (a failure found is shrunk within that share
    too, for at least 2 s); the summary says which checks it cut. With ``corpus``
    each failure is written there as a record, and each example is journaled
    first, so a case that kills the process becomes a ``crash`` record.
    A function that raises in its plain call at some input is reported once,
    as an ``input-domain`` failure with that input, and the checks go on
    without such inputs; ``invalid`` (exception types) declares them outside
    its domain from the start.
    ``layouts`` narrows the memory layouts drawn (default: all of
    strategies.layouts.LAYOUT_FEATURES: permuted, sliced, offset, expanded
    (stride 0), channels_last; ``()``: contiguous only) and ``alias=False``
    turns off aliasing between arguments, for one run. ``structured`` names
    the structured points drawn (fuzzdiff.structures: "ties", "zeros",
    "identity", "diagonal", "repeated_singular", "large", "offset",
    "overflow"), each on
    its own and shrinking toward none, as a Target's ``structured`` field
    does; by default every one that the declared ``domain`` holds (the values
    where hand-written derivatives break), ``()`` none. A Target passed as
    ``fn`` keeps its own unless ``structured`` is given.
    ``sizes`` is ``(smallest, largest)`` for every drawn dim (default 0 to 4;
    ``n>=1`` in the spec bounds one name). ``progress`` shows the check running on
    a terminal, and a line per finished check on stderr elsewhere (a pipe, a
    CI log); ``progress=False`` shows nothing. A spec that does not parse or fit
    the function's signature is a ValueError before any fuzzing. ``config``
    (a FuzzConfig; default: the defaults under $FUZZDIFF_*) holds the run's
    other settings, such as the per-example timeout and compile backends; the
    arguments here take precedence over it.
    """
    started = time.monotonic()
    seconds = _budget(budget, max_examples)
    config = FuzzConfig.resolve(base=config or environ_config(), variants=variants, structures=1, corpus=corpus)
    target = user_target(fn, spec, dtypes=dtypes, domain=domain, kwargs=kwargs, sizes=sizes)
    if structured is not None:
        target = replace(target, structured=tuple(structured))  # validated by Target: a ValueError
    elif not isinstance(fn, Target):
        target = replace(target, structured=hard_values(target.domain))
    names = _checks(checks)
    declared = declared_tolerances(names, rtol=rtol, atol=atol)
    if declared:
        target = replace(target, tolerances={**target.tolerances, **declared})
    report = Report(target, tolerances=_tolerance_words(declared, names), budget=seconds)
    session = _Session(
        fn=fn,
        target=target,
        report=report,
        hypothesis=_settings(MAX_EXAMPLES if max_examples is None else max_examples, seed),
        seed=seed,
        config=config,
        shrink_seconds=shrink_seconds,
        recipe=_recipe(target, fn),  # warns now, where the caller sees it, when records cannot replay
        outside=tuple(invalid),
        drawn=_case_options(layouts, alias),
        alias=alias,
    )
    with (
        _progress(progress, names, target.name) as shown,
        warnings.catch_warnings(record=True) as caught,
        torch_logs() as logs,
        FreshProcess() as fresh,
        torch_state.kept(),  # the caller's thread as it was, whatever a run's leftovers do late
    ):
        # torch's warnings inside the runs (a vmap fallback warns on every call):
        # collected and summarized once in the report, not printed per run
        warnings.simplefilter("always")
        session.fresh = fresh if isolate else None
        session.probe(names[0])
        for k, name in enumerate(names):
            shown.start(name)
            start = time.perf_counter()
            report.tallies[name] = session.run(name, _share(started, seconds, names[k:]))
            report.seconds[name] = time.perf_counter() - start
            shown.done(name, report)
    report.warnings = Counter(
        f"{w.category.__name__}: {str(w.message).strip().splitlines()[0][:200]}"
        for w in caught
        if not _torch_internal(w)
    )
    report.logs = logs
    for tally in report.tallies.values():
        report.logs.update(tally.logs)
    return report


def environ_config(environ: Mapping[str, str] | None = None) -> FuzzConfig:
    """The defaults under the FUZZDIFF_* variables of ``environ`` (default:
    this process's): what ``check`` runs at when its caller passes no config.
    Never a corpus: records are written only where a caller asks. Read here, by
    a driver: everything below is handed its settings."""
    return replace(FuzzConfig.resolve(os.environ if environ is None else environ), corpus=None)


@dataclass
class _Session:
    """One ``check`` call's runs, and what they learn on the way: input-domain
    errors found (``rules``: rejected from then on, by every check), whether
    the function is random, and the process that replays failures afresh."""

    fn: Callable[..., Any]
    target: Target
    report: Report
    hypothesis: settings
    seed: int | None
    config: FuzzConfig
    shrink_seconds: float | None
    recipe: dict[str, Any] | None
    outside: tuple[type[BaseException], ...]  # exceptions of the plain call that mean "not in the domain"
    drawn: dict[str, Any]
    alias: bool
    fresh: FreshProcess | None = None
    rules: list[tuple[str, str]] = field(default_factory=list)  # input-domain errors: (type, message pattern)

    def probe(self, first_check: str) -> None:
        """A function that draws random numbers is checked seeded alike, and replayed so."""
        self.target = self.report.target = _probed(self.target, first_check, self.config)
        if self.target.random and self.recipe is not None:
            self.recipe = {**self.recipe, "random": True}

    def run(self, name: str, until: float | None = None) -> Tally:
        """The check's runs until it finds nothing new: a failure's root cause is
        reported once and the search goes on, up to MAX_FAILURES of them; an
        input where the function itself raises is reported once, and such
        inputs are rejected from then on, by every check."""
        tally = Tally()
        seen: list[Known] = []
        for config, hypothesis in self.phases(name, until):
            if self.search(name, until, tally, seen, config, hypothesis):
                break
        return tally

    def phases(self, name: str, until: float | None) -> list[tuple[FuzzConfig, settings]]:
        """The check's runs in order, each a config and its Hypothesis settings:
        within a time budget, compile first gives each of COMPILE_STRATA a few
        cases, then draws from its whole mix for the rest of its share."""
        whole = [(self.config, self.hypothesis)]
        if name != "compile" or until is None:
            return whole
        first = settings(self.hypothesis, max_examples=STRATUM_EXAMPLES)
        strata = []
        for backends, transforms in COMPILE_STRATA:
            chosen = tuple(b for b in backends if b in self.config.compile_backends)
            allowed = tuple(t for t in transforms if t in self.config.compile_transforms)
            if chosen and allowed:
                strata.append((replace(self.config, compile_backends=chosen, compile_transforms=allowed), first))
        return strata + whole

    def search(
        self,
        name: str,
        until: float | None,
        tally: Tally,
        seen: list[Known],
        config: FuzzConfig,
        hypothesis: settings,
    ) -> bool:
        """One phase of ``run``, into ``tally`` and ``seen``: whether the check is done."""
        for _ in range(MAX_FAILURES + MAX_DOMAIN_ERRORS):
            try:
                tally.merge(self.attempt(name, tuple(seen), until, config, hypothesis))
                return tally.cut
            except FuzzFailure as failure:
                tally.merge(failure.tally or Tally())
                domain = _domain_error(self.target, failure)
                if domain is not None:
                    rule, message = domain
                    self.rules.append(rule)
                    self.report.add_failure(DOMAIN, failure, message)
                    continue
                self.report.add_failure(name, failure)
                if failure.verdict.kind != "fail":  # a hang or a crash: each further run could cost as much
                    return True
                seen.append(root_cause(name, failure.case, failure.verdict, self.target))
                if len(seen) >= MAX_FAILURES:
                    return True
                if until is not None and time.monotonic() > until:
                    tally.cut = True  # its share spent on this root cause: the next is not looked for
                    return True
        return False

    def attempt(
        self,
        name: str,
        seen: tuple[Known, ...],
        until: float | None = None,
        config: FuzzConfig | None = None,
        hypothesis: settings | None = None,
    ) -> Tally:
        """One run of the check, ``seen`` root causes counted, not raised."""
        if not self.alias and CHECKS[name].aliasing == "required":
            return _unsupported("aliasing is switched off for this run (alias=False)")
        fuzzed = replace(self.target, invalid=self.target.invalid + tuple(self.rules))
        if name == "per_sample" and isinstance(self.fn, torch.nn.Module):
            # per-sample gradients need the module itself, on one sample's shapes
            try:
                fuzzed = replace(per_sample_target(self.target, self.fn), invalid=fuzzed.invalid)
            except ValueError as e:  # the spec names no batch dim to take samples along
                return _unsupported(str(e))
        if self.outside:
            fuzzed = replace(fuzzed, fn=_rejecting(fuzzed.fn, self.outside))
        try:
            return fuzz(
                name,
                fuzzed,
                settings=self.hypothesis if hypothesis is None else hypothesis,
                seed=self.seed,
                config=self.config if config is None else config,
                shrink_seconds=_shrink_bound(self.shrink_seconds, until),
                definition=self.recipe,
                fresh=self.fresh,
                seen=seen,
                until=until,
                **self.drawn,
            )
        except Unsatisfiable:
            raises = [e.__name__ for e in self.outside] + [k for k, _ in self.rules]
            return _unsupported(f"every input drawn lies outside the function's domain (it raises {', '.join(raises)})")


def _unsupported(reason: str) -> Tally:
    tally = Tally()
    tally.add(Verdict("unsupported", reason))
    return tally


# A check reports at most this many distinct failures (root causes), and the
# whole call this many input-domain errors, each one rerun of a check.
MAX_FAILURES = 3
MAX_DOMAIN_ERRORS = 3

# Within a time budget the compile check gets a handful of cases, and its draws
# weigh f alone at three in eight over four backends: a bug of compile(grad(f))
# under one backend family would be met by chance. So its first cases go to
# these strata of (backends, transforms), STRATUM_EXAMPLES each: a Dynamo
# backend on f and on reverse mode first, then the aot_function partitioners
# (no Dynamo: the cheapest compiles), inductor's codegen (the dearest) last of
# each kind. One case each lets all eight fit in the few seconds a 30 s call
# gives compile (about 14 s for the eight on a small module); then its whole mix.
COMPILE_STRATA = (
    (("aot_eager",), ("none",)),
    (("aot_eager",), ("grad", "vjp")),
    (("aot_function", "aot_function_min_cut"), ("none", "grad", "vjp")),
    (("aot_function", "aot_function_min_cut"), ("jvp", "vmap", "dual")),
    (("inductor",), ("none",)),
    (("aot_eager",), ("jvp", "vmap", "dual")),
    (("inductor",), ("grad", "vjp")),
    (("inductor",), ("jvp", "vmap")),
)
STRATUM_EXAMPLES = 1


def declared_tolerances(
    names: Iterable[str], *, rtol: float | Mapping[str, float] | None, atol: float | Mapping[str, float] | None
) -> dict[str, Tol]:
    """The caller's tolerances as per-check overrides: a number for every
    check, or a mapping check -> number. A declared tolerance loosens the
    dtype's default, never tightens it (fuzzdiff.tolerance)."""
    names = list(names)
    per: dict[str, dict[str, float]] = {}
    for which, value in (("rtol", rtol), ("atol", atol)):
        if value is None:
            continue
        items = value.items() if isinstance(value, Mapping) else ((n, value) for n in names)
        for check_name, number in items:
            get_check(check_name)  # UnknownCheck names the valid ones
            if isinstance(number, bool) or not isinstance(number, (int, float)) or not number >= 0:
                raise ValueError(f"{which} must be a number >= 0 (or a mapping check -> number), got {number!r}")
            per.setdefault(check_name, {})[which] = float(number)
    return {
        name: Tol(v.get("atol", 0.0), v.get("rtol", 0.0), "declared by the caller (fuzzdiff.check rtol=/atol=)")
        for name, v in per.items()
    }


def _tolerance_words(declared: Mapping[str, Tol], names: Sequence[str]) -> str:
    if not declared:
        return ""
    values = {(t.rtol, t.atol) for t in declared.values()}
    if len(values) == 1 and set(declared) == set(names):
        ((rtol, atol),) = values
        return f"rtol={rtol:g}, atol={atol:g} for every check (the larger of these and the dtype's default applies)"
    return "; ".join(f"{n}: rtol={t.rtol:g}, atol={t.atol:g}" for n, t in declared.items()) + (
        " (the larger of these and the dtype's default applies)"
    )


DOMAIN = "input-domain"  # Failure.check of an input where the function itself raises


def _probed(target: Target, first_check: str, config: FuzzConfig) -> Target:
    """``target``, checked for randomness by calling it (fuzzdiff.random_probe);
    with a corpus, each probing call is journaled as the first check's, so that
    an input that kills the process leaves a crash record."""
    if config.corpus is None:
        return probed(target, config.timeout)
    journal = Journal(config.corpus, first_check, target.name, config.timeout)

    def calling(case: Case) -> None:
        journal.end()
        journal.begin_case(case)
        journal.begin(0)

    try:
        return probed(target, config.timeout, calling)
    finally:
        journal.close()


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


def _domain_error(target: Target, failure: FuzzFailure) -> tuple[tuple[str, str], str] | None:
    """Whether ``failure`` is the function raising at its input in plain eager
    use: in its call, or in its backward (an empty batch its backward cannot
    take), whatever check came upon it. Then the rule that rejects such
    errors from then on, and the finding's message; None for any other
    failure (an error only under a transform is that check's finding)."""
    if not isinstance(failure.verdict.errors.get("exception"), str):
        return None
    found = _eager_error(target, failure.case)
    if found is None:
        return None
    error, where = found
    kind = type(error).__name__
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    message = (
        f"the function raises {kind} at this input, {where}: {first[:300]} "
        f"(invalid=({kind},) declares such inputs outside its domain)"
    )
    return (kind, message_pattern(first)), message


def _eager_error(target: Target, case: Case) -> tuple[Exception, str] | None:
    """What the target raises at ``case`` in plain eager use, and where: its
    call without autograd, else its call and backward (a cotangent of ones)."""
    try:
        args = case.materialize(requires_grad=False).args
        with torch.no_grad():
            target(*args, **case.kwargs)
    except Exception as e:  # noqa: BLE001 - any exception of the user's function
        return e, "in its plain call"
    try:
        inputs = case.materialize()
        outs = [t for t in tree_leaves(target(*inputs.args, **case.kwargs)) if _differentiable(t)]
        if outs and inputs.leaves:
            torch.autograd.grad(outs, inputs.leaves, [torch.ones_like(o) for o in outs], allow_unused=True)
    except Exception as e:  # noqa: BLE001
        return e, "in its backward"
    return None


def _differentiable(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())


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


def hard_values(domain: Mapping[str, tuple[float | None, float | None]]) -> tuple[str, ...]:
    """The structured points a function is fuzzed at by default: those every
    argument's declared domain holds. Scaled, shifted and rotated values
    leave a bounded interval; zeros (and identities, with their ones) must lie
    inside it, not on its edge (``log``'s (0, inf))."""
    kept = set(STRUCTURES)
    for low, high in domain.values():
        if low is not None or high is not None:
            kept -= {"large", "offset", "overflow", "repeated_singular"}

        def inside(x: float, low: float | None = low, high: float | None = high) -> bool:
            return (low is None or low < x) and (high is None or x < high)

        if not inside(0.0):
            kept -= {"zeros", "identity", "diagonal"}
        if not inside(1.0):
            kept.discard("identity")
    return tuple(name for name in STRUCTURES if name in kept)


def _budget(budget: float | None, max_examples: int | None) -> float | None:
    """The call's time budget in seconds, None for no limit."""
    if budget is None:
        return BUDGET if max_examples is None else None
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget > 0:
        raise ValueError(f"budget must be a positive number of seconds (float('inf'): no limit), got {budget!r}")
    return None if budget == float("inf") else float(budget)


def _shrink_bound(seconds: float | None, until: float | None) -> float | None:
    """Shrinking within the check's share of the budget too, but never under
    MIN_SHRINK seconds: a failure found late is still made small."""
    if until is None:
        return seconds
    left = max(MIN_SHRINK, until - time.monotonic())
    return left if seconds is None else min(seconds, left)


def _weight(check: str) -> float:
    return min(MAX_WEIGHT, max(1.0, example_cost(check) / example_cost("grad")))


def _share(started: float, seconds: float | None, names: Sequence[str]) -> float | None:
    """When the first of ``names`` (the checks still to run) must stop: its
    weight's share of the time left, less the WRAP_UP part of the budget. A
    check that ends early leaves its time to the ones after it."""
    if seconds is None:
        return None
    now = time.monotonic()
    left = max(0.0, started + (1.0 - WRAP_UP) * seconds - now)
    return now + left * _weight(names[0]) / sum(_weight(n) for n in names)


class _Shown:
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
        outcome = ", ".join(f"{row[k]} {k}" for k in ("failed", "known", "inconclusive") if row[k])
        if tally.only_unsupported:
            outcome = "unsupported"
        elif tally.cut and not tally.cases:
            outcome = "not run"
        print(
            f"fuzzdiff.check {self.target}: {name}: {tally.cases} cases, {outcome or 'passed'}, "
            f"{report.seconds[name]:.1f} s" + (", cut by the time budget" if tally.cut and tally.cases else ""),
            file=sys.stderr,
            flush=True,
        )


@contextlib.contextmanager
def _progress(show: bool | None, names: Sequence[str], target: str) -> Iterator[_Shown]:
    """A live bar on a terminal; elsewhere a line per finished check, unless ``show`` is False."""
    if show is False or (show is None and not sys.stderr.isatty()):
        yield _Shown(target, lines=show is None)
        return
    with Progress(
        TextColumn("fuzzdiff.check {task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} checks"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        yield _Shown(target, lines=False, bar=bar, task=bar.add_task("", total=len(names)))


def assert_ok(fn: Callable[..., Any] | Target, spec: str | None = None, **options: Any) -> Report:
    """``check`` inside the user's own test: AssertionError with the shrunk repro on failure."""
    report = check(fn, spec, **options)
    if not report.ok:
        raise AssertionError("fuzzdiff found a failure:\n" + report.summary())
    return report
