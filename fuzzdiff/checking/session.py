"""One ``fuzzdiff.check`` call's runs: each check searched until it finds
nothing new, the compile strata first within a time budget, and what the
runs learn on the way (input-domain errors, whether the function is random).
Within a time budget, the runs end by its ``deadline``: the case in flight
there is stopped, and a failure found late is settled by ``settle_by``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from hypothesis import settings
from hypothesis.errors import Unsatisfiable

from fuzzdiff.case.case import Case
from fuzzdiff.checking.budget import START_FLOOR
from fuzzdiff.checking.input_domain import DOMAIN, domain_error, rejecting
from fuzzdiff.checking.report import Report
from fuzzdiff.checks import CHECKS
from fuzzdiff.config import FuzzConfig
from fuzzdiff.guards.timeout import ExampleTimeout, OutOfTime, bounded, limited
from fuzzdiff.record.journal import Journal
from fuzzdiff.search.blame import PYTORCH, USER, Blame, known_reached
from fuzzdiff.search.fresh import FreshProcess
from fuzzdiff.search.fuzzing import Search, fuzz
from fuzzdiff.search.outcome import AllRejected, FuzzFailure, Tally
from fuzzdiff.search.random_calls import with_randomness
from fuzzdiff.search.refused_dtypes import refused_dtypes
from fuzzdiff.search.root_cause import root_cause
from fuzzdiff.search.unreached_parameters import unreached_parameters
from fuzzdiff.targets.known import Known
from fuzzdiff.targets.target import Target
from fuzzdiff.targets.user import per_sample_target
from fuzzdiff.verdict import Verdict

__all__ = ["Session", "COMPILE_STRATA", "STRATUM_EXAMPLES", "MAX_FAILURES", "MAX_DOMAIN_ERRORS"]

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
    (("inductor",), ("jvp", "vmap", "dual")),
)
STRATUM_EXAMPLES = 1


@dataclass
class Session:
    """One ``check`` call's runs, and what they learn on the way: input-domain
    errors found (``rules``: rejected from then on, by every check), whether
    the function is random, and the process that reruns failures afresh."""

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
    # torch's known discrepancies the code was found to reach: known from then on, by every check
    reached: list[Known] = field(default_factory=list)
    deadline: float | None = None  # time.monotonic() instant: the case in flight is stopped there
    settle_by: float | None = None  # a failure found is settled (rerun afresh, blamed) by then, or unconfirmed

    def ask_randomness(self, first_check: str, until: float | None = None) -> None:
        """A function that draws random numbers is checked seeded alike, and
        rerun so. Asking not done by ``until`` answers nothing (the report says so)."""
        start = time.monotonic()
        try:
            with bounded(until):
                self.target = self.report.target = _with_randomness(self.target, first_check, self.config)
        except OutOfTime:
            self.report.randomness_unasked = (
                f"not asked whether it draws random numbers: the calls that ask ran past "
                f"{time.monotonic() - start:.1f} s, its part of the time budget"
            )
        if self.target.random and self.recipe is not None:
            self.recipe = {**self.recipe, "random": True}

    def ask_parameters(self, until: float | None = None) -> None:
        """Whether a module's drawn parameters reach its outputs: where they
        do not, the report says its parameters' checks say nothing."""
        try:
            with bounded(until):
                self.report.unreached = unreached_parameters(self.target) or ""
        except OutOfTime:
            pass

    def ask_dtypes(self, first_check: str, until: float | None = None) -> None:
        """A dtype the function's plain call refuses where another runs (its
        own tensors are float64) is not drawn: the report says which, and the
        error that refuses it. A call past the per-example timeout, or past
        ``until``, answers nothing (the checks report a hang)."""
        try:
            with (
                bounded(until),
                limited(self.config.timeout),
                _journaled_calls(first_check, self.target, self.config) as calling,
            ):
                refused = refused_dtypes(self.target, calling)
        except (OutOfTime, ExampleTimeout):
            return
        if not refused:
            return
        kept = tuple(d for d in self.target.dtypes if d not in refused)
        self.target = self.report.target = replace(self.target, dtypes=kept)
        names = ", ".join(str(d).removeprefix("torch.") for d in refused)
        why = "; ".join(f"{str(d).removeprefix('torch.')}: {error}" for d, error in refused.items())
        self.report.dtypes_left_out = (
            f"{names} not drawn: the plain call raises in {names} at inputs where "
            f"{', '.join(str(d).removeprefix('torch.') for d in kept)} runs ({why}); "
            "the function holds tensors of one dtype, or refuses the others"
        )

    def run(self, name: str, until: float | None = None) -> Tally:
        """The check's runs until it finds nothing new: a failure's root cause is
        reported once and the search goes on, up to MAX_FAILURES of them; an
        input where the function itself raises is reported once, and such
        inputs are rejected from then on, by every check."""
        tally = Tally()
        if until is not None:
            left, floor = until - time.monotonic(), START_FLOOR.get(name, 0.0)
            if left <= 0.0 or left < floor:  # not started: too little of the budget left
                tally.cut = True
                tally.cut_reason = _not_started(left, floor)
                return tally
        seen: list[Known] = []
        for config, hypothesis in self.phases(name, until):
            started, drawn = time.monotonic(), tally.drawn
            if self.search(name, until, tally, seen, config, hypothesis):
                break
            if until is not None:
                # a phase's first case may cost what the last one did (compile: a new
                # backend or transform compiles again): not started past the share
                each = (time.monotonic() - started) / max(1, tally.drawn - drawn)
                if time.monotonic() + each > until:
                    tally.cut = True
                    tally.cut_reason = tally.cut_reason or (
                        f"a case took {each:.1f} s, more than was left of its share"
                    )
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
                done = self.attempt(name, tuple(seen), until, config, hypothesis)
                for found in list(done.unconfirmed):  # the time budget ended before its rerun afresh
                    done.unconfirmed.remove(found)
                    if not self._outside(found, done, counted="inconclusive"):
                        self.report.add_unconfirmed(name, found)
                tally.merge(done)
                return tally.cut
            except FuzzFailure as failure:
                done = failure.tally or Tally()
                outside = self._outside(failure, done)
                if failure.unconfirmed:  # the budget ended before its input's domain was asked
                    done.set_aside(
                        failure, "inconclusive", "a failure found, not confirmed before the time budget ended"
                    )
                    self.report.add_unconfirmed(name, failure)
                    tally.merge(done)
                    tally.cut, tally.cut_reason = True, tally.cut_reason or failure.unconfirmed
                    return True
                known = None if outside else known_reached(failure.evidence)
                if known is not None:  # torch's recorded bug, met through the code: known, and the search goes on
                    done.set_aside(failure, "known")
                    done.known[known.describe()] += sum(failure.failing.values())
                    self.report.add_failure(name, failure, known=True)
                    self.reached.append(known)
                tally.merge(done)
                if outside or known is not None:
                    continue
                self.report.add_failure(name, failure)
                if failure.verdict.kind != "fail":  # a hang or a crash: each further run could cost as much
                    return True
                if until is not None and time.monotonic() > until:
                    tally.cut = True  # its share spent on this root cause: the next is not looked for
                    tally.cut_reason = tally.cut_reason or "its share was spent on a failure found"
                    return True
                try:
                    with bounded(self.deadline):  # it may run the check again (at a contiguous layout)
                        seen.append(root_cause(name, failure.case, failure.verdict, self.target))
                except OutOfTime:
                    tally.cut = True
                    tally.cut_reason = tally.cut_reason or "its share was spent on a failure found"
                    return True
                if len(seen) >= MAX_FAILURES:
                    return True
        return False

    def _outside(self, failure: FuzzFailure, tally: Tally, counted: str | None = None) -> bool:
        """Whether ``failure`` is the function raising at its input in plain
        eager use: then reported once as an input-domain error, rejected from
        then on, and its failing runs in ``tally`` are rejected draws, not
        failures (``counted``: what they were counted as, if not failed)."""
        judged = self.target
        if failure.check == "per_sample" and isinstance(self.fn, torch.nn.Module):
            # its case is one sample's (the spec's batch dim dropped): the plain call is the module on a batch of it
            judged = per_sample_target(self.target, self.fn)
        try:
            with bounded(self.settle_by):  # a slow function's plain call and backward, once more each
                domain = domain_error(judged, failure)
        except OutOfTime:
            failure.unconfirmed = failure.unconfirmed or (
                "the time budget ended while it was asked whether its input lies in the function's domain"
            )
            return False
        if domain is None:
            return False
        rule, message, torchs = domain
        self.rules.append(rule)  # met once: from then on rejected, by every check
        if torchs is not None:  # an input torch's op should take: the check's finding, torch's bug
            failure.blame = Blame(PYTORCH, torchs, "torch op")
            return False
        # a plain call: whatever check came upon it, none of torch's machinery takes part
        failure.blame = Blame(
            USER, "your function's plain call raises at this input, in eager mode, with no check's machinery"
        )
        self.report.add_failure(DOMAIN, failure, message)
        tally.set_aside(failure, "rejected", counted=counted)
        return True

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
        fuzzed = replace(
            self.target, invalid=self.target.invalid + tuple(self.rules), known=self.target.known + tuple(self.reached)
        )
        if name == "per_sample" and isinstance(self.fn, torch.nn.Module):
            # per-sample gradients need the module itself, on one sample's shapes
            try:
                fuzzed = replace(per_sample_target(self.target, self.fn), invalid=fuzzed.invalid)
            except ValueError as e:  # the spec names no batch dim to take samples along
                return _unsupported(str(e))
        if self.outside:
            fuzzed = replace(fuzzed, fn=rejecting(fuzzed.fn, self.outside))
        try:
            return fuzz(
                name,
                fuzzed,
                replace(
                    self.config if config is None else config,
                    seed=self.seed,
                    shrink_seconds=self.shrink_seconds,
                    case_options=self.drawn,
                ),
                settings=self.hypothesis if hypothesis is None else hypothesis,
                search=Search(
                    definition=self.recipe,
                    fresh=self.fresh,
                    seen=seen,
                    until=until,
                    deadline=self.deadline,
                    settle_by=self.settle_by,
                ),
            )
        except AllRejected as every:  # each draw outside the function's domain: rejected, not judged
            return every.tally
        except Unsatisfiable:
            raises = [e.__name__ for e in self.outside] + [k for k, _ in self.rules]
            return _unsupported(f"every input drawn lies outside the function's domain (it raises {', '.join(raises)})")


def _not_started(left: float, floor: float) -> str:
    """Why a check was not started, its ``left`` seconds of the budget under its ``floor``."""
    if left <= 0.0:
        return "no time was left for it"
    return f"{left:.1f} s were left for it, under its {floor:g} s floor"


def _unsupported(reason: str) -> Tally:
    tally = Tally()
    tally.add(Verdict("unsupported", reason))
    return tally


def _with_randomness(target: Target, first_check: str, config: FuzzConfig) -> Target:
    """``target``, checked for randomness by calling it (fuzzdiff.search.random_calls)."""
    with _journaled_calls(first_check, target, config) as calling:
        return with_randomness(target, config.timeout, calling)


@contextmanager
def _journaled_calls(first_check: str, target: Target, config: FuzzConfig) -> Iterator[Callable[[Case], None] | None]:
    """What a question asked by calling the function tells before each call:
    with a corpus, the call is journaled as the first check's, so that an input
    that kills the process leaves a crash record; without one, nothing."""
    if config.corpus is None:
        yield None
        return
    journal = Journal(config.corpus, first_check, target.name, config.timeout)

    def calling(case: Case) -> None:
        journal.end()
        journal.begin_case(case)
        journal.begin(0)

    try:
        yield calling
    finally:
        journal.close()
