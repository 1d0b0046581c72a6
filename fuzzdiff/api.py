"""``fuzzdiff.check`` and ``fuzzdiff.assert_ok``: fuzz the user's own code (docs/pages/design.md, contract 3).

Here the call's arguments become a target; its checks' runs are
fuzzdiff.checking.session's, the time budget's shares fuzzdiff.checking.budget's,
and what the call found is a fuzzdiff.checking.report.Report.
"""

from __future__ import annotations

import os
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis.errors import InvalidArgument

from fuzzdiff.case.structures import STRUCTURES
from fuzzdiff.checking.budget import LAST, RANDOMNESS, SETTLING, Spent, budget_seconds, reaching, share
from fuzzdiff.checking.progress import showing
from fuzzdiff.checking.report import Failure, Report, Thin
from fuzzdiff.checking.session import Session
from fuzzdiff.checks import CHECKS, get_check
from fuzzdiff.config import FuzzConfig
from fuzzdiff.guards import torch_state
from fuzzdiff.guards.torch_logs import torch_logs
from fuzzdiff.script.literals import ScriptError
from fuzzdiff.script.source import target_code
from fuzzdiff.search.fresh import FreshProcess
from fuzzdiff.targets.target import Target, Tol
from fuzzdiff.targets.user import definition, importable, module_definition, user_target
from strategies.layouts import check_layout_features

__all__ = ["check", "assert_ok", "Report", "Failure", "Thin", "ThinWarning", "declared_tolerances", "hard_values"]

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
    """The checks to run, in order: by default every registered one, compile
    last (check_budget.LAST)."""
    if checks is None:
        return sorted(CHECKS, key=lambda name: name in LAST)
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
    ``max_examples`` is given; ``float("inf")``: none), a ceiling: the call
    returns within it and 2 s more. Each check, when it starts, gets a share
    of the time left in proportion to its cost (its first case, which pays
    one-off costs, counted only past a share's length), and begins no case
    after it, nor one that the budget's end would stop at the cost of its
    last; the case in flight when the budget ends is stopped, unjudged (in
    the main thread). A failure found is shrunk within its check's share (for at least
    2 s, but not past the budget) and confirmed in a fresh process within
    1.5 s past the budget; one the budget leaves unconfirmed is no failure:
    ``report.unconfirmed`` holds it. ``report.thin`` names each check that
    judged fewer than 10 cases, and why (cut, not reached, most draws
    rejected); the summary says so, and for a check not reached, the
    ``budget=`` that would reach it. With ``corpus``
    each failure is written there as a record, and each example is journaled
    first, so a case that kills the process becomes a ``crash`` record.
    A function that raises in its plain call at some input is reported once,
    as an ``input-domain`` failure with that input, and the checks go on
    without such inputs: rejected draws, not failures (the summary's
    "rejected"), with the spec bound that leaves them out where every one had
    a dim at size 0; ``invalid`` (exception types) declares them outside its
    domain from the start (advised only where the function's own code raises,
    never for an error raised inside a torch op).
    ``layouts`` narrows the memory layouts drawn (default: all of
    strategies.layouts.LAYOUT_FEATURES: permuted, sliced, offset, expanded
    (stride 0), channels_last; ``()``: contiguous only) and ``alias=False``
    turns off aliasing between arguments, for one run. ``structured`` names
    the structured points drawn (fuzzdiff.case.structures: "ties", "zeros",
    "identity", "diagonal", "repeated_singular", "large", "offset",
    "overflow", "all_zero", "all_equal"), each on
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
    seconds = budget_seconds(budget, max_examples)
    end = None if seconds is None else started + seconds
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
    report = Report(target, tolerances=_tolerance_words(declared, names), budget=seconds, max_examples=max_examples)
    session = Session(
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
        deadline=end,
        settle_by=None if end is None else end + SETTLING,
    )
    with (
        showing(progress, names, target.name) as shown,
        warnings.catch_warnings(record=True) as caught,
        torch_logs() as logs,
        FreshProcess() as fresh,
        torch_state.kept(),  # the caller's thread as it was, whatever a run's leftovers do late
    ):
        # torch's warnings inside the runs (a vmap fallback warns on every call):
        # collected and summarized once in the report, not printed per run
        warnings.simplefilter("always")
        session.fresh = fresh if isolate else None
        session.ask_randomness(names[0], None if seconds is None else started + RANDOMNESS * seconds)
        session.ask_parameters(None if seconds is None else started + RANDOMNESS * seconds)
        session.ask_dtypes(names[0], None if seconds is None else started + RANDOMNESS * seconds)
        before_checks = time.monotonic() - started
        for k, name in enumerate(names):
            shown.start(name)
            start = time.perf_counter()
            tally = report.tallies[name] = session.run(name, share(started, seconds, names[k:]))
            report.seconds[name] = time.perf_counter() - start
            if seconds is not None and tally.cut and not tally.drawn:  # not reached
                report.reach[name] = reaching(name, names, _spent(report), before_checks, seconds)
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


def _spent(report: Report) -> dict[str, Spent]:
    """What each check that ran took, for the budget that would reach one that did not."""
    return {
        name: Spent(report.seconds[name], tally.cut, report.seconds[name] / max(1, tally.cases + tally.rejected))
        for name, tally in report.tallies.items()
    }


def environ_config(environ: Mapping[str, str] | None = None) -> FuzzConfig:
    """The defaults under the FUZZDIFF_* variables of ``environ`` (default:
    this process's): what ``check`` runs at when its caller passes no config.
    Never a corpus: records are written only where a caller asks. Read here, by
    a driver: everything below is handed its settings."""
    return replace(FuzzConfig.resolve(os.environ if environ is None else environ), corpus=None)


def declared_tolerances(
    names: Iterable[str], *, rtol: float | Mapping[str, float] | None, atol: float | Mapping[str, float] | None
) -> dict[str, Tol]:
    """The caller's tolerances as per-check overrides: a number for every
    check, or a mapping check -> number. A declared tolerance loosens the
    dtype's default, never tightens it (fuzzdiff.confirm.tolerance)."""
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
            kept -= {"zeros", "identity", "diagonal", "all_zero"}
        if not inside(1.0):
            kept.discard("identity")
    return tuple(name for name in STRUCTURES if name in kept)


class ThinWarning(UserWarning):
    """A passing ``assert_ok`` whose answer rests on few cases (``Report.thin``)
    or left a failure found unconfirmed: said, without failing the test."""


def assert_ok(fn: Callable[..., Any] | Target, spec: str | None = None, **options: Any) -> Report:
    """``check`` inside the user's own test: AssertionError with the shrunk repro
    on failure (its summary names the thin checks too). A pass with thin checks
    or an unconfirmed failure warns (ThinWarning): pytest lists it, the test passes."""
    report = check(fn, spec, **options)
    if not report.ok:
        raise AssertionError("fuzzdiff found a failure:\n" + report.summary())
    said = report.warning()
    if said:
        warnings.warn(said, ThinWarning, stacklevel=2)
    return report
