"""Fuzzing one check over one target with Hypothesis.

This is what the pytest suite, ``fuzzdiff run`` and ``fuzzdiff.check`` share:
draw cases, run the check, let Hypothesis shrink a failure to a minimal case,
settle it (fuzzdiff.search.settling: a fresh process's rerun, whose bug it is) and
report it with the case as JSON so it can be replayed without Hypothesis.
"""

from __future__ import annotations

import gc
import json
import math
import time
from collections import Counter
from dataclasses import dataclass
from typing import NoReturn

import hypothesis
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.errors import FlakyFailure, Unsatisfiable, UnsatisfiedAssumption

from fuzzdiff.case.case import Case
from fuzzdiff.case.features import case_features
from fuzzdiff.case.spec import empty_dims
from fuzzdiff.checks import Check, get_check, validate
from fuzzdiff.config import FuzzConfig
from fuzzdiff.confirm.ladder import ConfirmationCut, confirming_by
from fuzzdiff.guards import torch_state
from fuzzdiff.guards.timeout import ExampleTimeout, OutOfTime, Watchdog
from fuzzdiff.guards.torch_logs import torch_logs
from fuzzdiff.record.files import write_record
from fuzzdiff.record.journal import Journal, recover
from fuzzdiff.search.fresh import FreshProcess
from fuzzdiff.search.layout_tour import tour_classes, tour_strategy
from fuzzdiff.search.outcome import AllRejected, Empty, FuzzFailure, Tally
from fuzzdiff.search.runner import case_strategy, verdict_at
from fuzzdiff.search.settling import settle, stand_in_record
from fuzzdiff.targets import get_target
from fuzzdiff.targets.known import Known, crashing, matching
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict

__all__ = [
    "fuzz",
    "Search",
    "Tally",  # with FuzzFailure, what fuzz yields (fuzzdiff.search.outcome), handed on with it
    "FuzzFailure",
    "example_structures",
    "settle_heap",
]


# A passing verdict steers Hypothesis only once its error uses this much of
# the allowed error. Ordinary examples stay far below (median 0, 99.9th
# percentile 1%, over 2240 grad examples of 14 catalog ops): steering on their
# round-off sent half of every run's examples hill-climbing on noise, and
# structures a layout bug needs went unexplored (a permuted-matrix bug was
# missed in 2 of 8 seeds at 200 examples; found in all 8 without).
STEER_FROM = 0.05
COMPILE_TIMEOUT_FACTOR = 5  # a compiling check's examples get this many times the per-example time


def _score(verdict: Verdict) -> float | None:
    """How close a verdict came to failing, for Hypothesis's targeted search
    (None: not close enough to steer). Without an allowed error (inconclusive
    verdicts: suspicious already), the error relative to its scale."""
    errors = verdict.errors
    err = errors.get("abs_error")
    if not (isinstance(err, float) and math.isfinite(err)):
        return None
    allowed = errors.get("allowed")
    if isinstance(allowed, float) and allowed > 0:
        closeness = err / allowed
        return closeness if closeness >= STEER_FROM else None
    scale = errors.get("scale")
    if isinstance(scale, float) and scale > 0:
        return min(err / scale, 1e6)
    return None


_HEAP_SETTLED = False


def settle_heap() -> None:
    """Take what is alive before the first run out of the cyclic collector's way.

    torch, Hypothesis and the catalog leave a quarter of a million objects
    that live as long as the process. Every full collection walks them all
    (about 0.1 s each, several per minute of fuzzing: a twentieth of the run)
    and can never free them. Frozen once per process, they stay managed by
    reference counting; only a cycle among them would no longer be collected.
    A process-wide change: only for processes fuzzdiff owns (the command line,
    campaign workers, benchmarks), never inside a user's ``fuzzdiff.check``.
    """
    global _HEAP_SETTLED
    if not _HEAP_SETTLED:
        _HEAP_SETTLED = True
        gc.collect()
        gc.freeze()
        # A full collection still walks what the runs keep alive after this
        # (Hypothesis's example trees, the value caches): a tenth of a second
        # every few seconds at the default threshold. Ten times rarer here; the
        # young generations, where a run's cyclic garbage dies, keep their pace.
        young, middle, old = gc.get_threshold()
        gc.set_threshold(young, middle, max(old, 100))


# Seconds of shrinking a failure gets, even past the search's time budget
# (but not past its deadline).
MIN_SHRINK = 2.0
# Before a deadline, shrinking leaves the time of this many failing cases:
# its last step, and the failure's rerun in a fresh process with the
# evidence of whose bug it is (fuzzdiff.search.settling), each about as dear.
SETTLING_CASES = 3
# Seconds a mismatch's confirmation may take at least, even past the search's
# time budget (not past its deadline): on a slow function the confirmation
# costs hundreds of its calls (an iterative solver's, rounded op by op: 13 s
# of a 30 s budget), and the checks after this one would get no time.
CONFIRM_MIN = 4.0


class _ShrinkBound:
    """Ends shrinking ``seconds`` after the first failure: the next example
    not seen failing ends Hypothesis's run (OutOfTime, which it lets through),
    and the smallest failure so far is the result. Passing such examples
    unrun instead still paid for every shrink step's draw: a layout tour's
    eight cases cost 30 ms to draw, and Hypothesis tried 700 more of them.
    Where the search has a time budget (``budget``, a time.monotonic()
    instant), shrinking ends there too, but never sooner than MIN_SHRINK
    seconds after the failure: a failure found late is still made small, and
    one found at the end of a slow function's budget does not shrink for as
    long again. Where it has a ``deadline`` (when a case in flight is
    stopped), shrinking ends SETTLING_CASES failing cases' cost before it,
    MIN_SHRINK or not: the failure is still to be settled.

    An example whose cases were seen failing fails again without running,
    at any time: many of Hypothesis's choice sequences draw the same cases,
    and on a slow function one confirmed failure costs seconds (an ODE
    solve's second derivative: about ten of them, each confirmed anew)."""

    def __init__(self, seconds: float | None, budget: float | None = None, deadline: float | None = None):
        if seconds is not None and not seconds >= 0:
            raise ValueError(f"shrink_seconds must be >= 0, got {seconds}")
        self.seconds = seconds
        self.budget = budget
        self.deadline = deadline
        self.until: float | None = None
        self.failing: dict[str, tuple[Case, Verdict]] = {}
        self.cut = False

    @staticmethod
    def _key(cases) -> str:
        return json.dumps([c.to_json() for c in cases], sort_keys=True)

    def failed(self, cases, variant: Case, verdict: Verdict, cost: float = 0.0) -> None:
        """``cases`` failed, as ``variant`` with ``verdict``, after ``cost`` seconds of their run."""
        if not self.failing:
            now = time.monotonic()
            ends = [now + self.seconds] if self.seconds is not None else []
            if self.budget is not None:
                ends.append(max(self.budget, now + MIN_SHRINK))
            if self.deadline is not None:
                ends.append(self.deadline - SETTLING_CASES * cost)
            self.until = min(ends, default=None)
        self.failing[self._key(cases)] = (variant, verdict)

    def smallest(self) -> tuple[Case, Verdict] | None:
        """The last failure seen: each one Hypothesis's shrinker met was
        smaller than the best before it."""
        return next(reversed(self.failing.values()), None)

    def seen_failing(self, cases) -> tuple[Case, Verdict] | None:
        """The failing variant and its verdict, where ``cases`` failed before."""
        return self.failing.get(self._key(cases)) if self.failing else None

    def end_if_over(self, cases) -> None:
        if self.until is None or time.monotonic() < self.until or self._key(cases) in self.failing:
            return
        raise OutOfTime("its time to shrink ended")


def _allowance(until: float | None, deadline: float | None, began: float) -> float | None:
    """When a mismatch found in a case begun at ``began`` must be confirmed by:
    the search's time budget, or CONFIRM_MIN seconds from the case's start if
    later, never past the deadline. None: no time budget, no allowance."""
    if until is None:
        return deadline
    instant = max(until, began + CONFIRM_MIN)
    return instant if deadline is None else min(instant, deadline)


def _fail(check: str, target: str, variant: Case, verdict: Verdict) -> NoReturn:
    """Raise the failure, from one place: Hypothesis tells bugs apart by where
    they are raised, and a failure seen again (``_ShrinkBound``) is the same bug."""
    raise FuzzFailure(check, target, variant, verdict)


class _TimeBudget:
    """Ends the search at ``until`` (time.monotonic()), before the next case
    starts (a case begun before it may end past it), and before a case that
    would run past ``deadline`` at the cost of the last (``cost``, seconds):
    it would be stopped there half-way. The first case of a run moves
    ``until`` on by its cost, up to the share's length: it pays what a
    check's first call costs once (torch sets forward-mode AD up at its first
    dual tensor: a second on two busy cores, a whole share of a cheap
    function's forward check), yet a function whose every case outlasts its
    share still gets one case. Disarmed by the first failure, whose
    shrinking shrink_seconds bounds instead."""

    def __init__(self, until: float | None, deadline: float | None = None):
        self.until = until
        self.deadline = deadline
        self.cost = 0.0
        self.length = 0.0 if until is None else max(0.0, until - time.monotonic())

    def check(self) -> None:
        if self.until is None:
            return
        now = time.monotonic()
        if now > self.until:
            took = f" (a case took {self.cost:.1f} s)" if self.cost >= 0.1 else ""
            raise OutOfTime(f"its share was spent{took}")
        if self.deadline is not None and now + self.cost > self.deadline:
            raise OutOfTime(f"a case took {self.cost:.1f} s, more than was left of the budget")

    def took(self, seconds: float) -> None:
        """A case ran for ``seconds``."""
        if self.until is not None and self.length:
            self.until += min(seconds, self.length)
            self.length = 0.0  # the first case's only
        self.cost = seconds

    def disarm(self) -> None:
        self.until = None


def example_structures(cases: st.SearchStrategy[Case], structures: int) -> st.SearchStrategy[list[Case]]:
    """One Hypothesis example's drawn cases: ``structures // 2`` (at least 1)
    to ``structures``. The minimum matters: Hypothesis's lists average at most
    min_size + 5 elements, and from 1 they averaged 3.1 in the throughput
    bench's mix, from 4 5.4."""
    return st.lists(cases, min_size=max(1, structures // 2), max_size=structures)


@dataclass(frozen=True)
class Search:
    """What one fuzz() call is told beside the run's configuration: where its
    failures are settled, what it has found before, and when it must end.

    ``definition`` goes into a failure's corpus record (a user target's
    recipe, fuzzdiff.targets.user.definition). ``fresh`` (a
    fuzzdiff.search.fresh.FreshProcess) reruns the shrunk failure in a
    process that has run nothing else, before it is reported or recorded.
    ``seen``: signatures of failures the caller has reported already
    (``root_cause``), counted rather than raised. ``until``, ``deadline`` and
    ``settle_by`` are time.monotonic() instants: the search ends at
    ``until`` before the next case, the case in flight is stopped at
    ``deadline``, and a failure not settled by ``settle_by`` is not confirmed.
    ``tour``: layout classes (fuzzdiff.search.layout_tour.TOUR) that each
    example meets one by one, those that apply, in this order (a campaign's
    first batch of a pair), instead of its drawn mix; ``tour_cases``: at
    most that many of them (None: all).
    """

    definition: dict | None = None
    fresh: FreshProcess | None = None
    seen: tuple[Known, ...] = ()
    until: float | None = None
    deadline: float | None = None
    settle_by: float | None = None
    tour: tuple[str, ...] = ()
    tour_cases: int | None = None


def fuzz(
    check: Check | str,
    target: Target | str,
    config: FuzzConfig | None = None,
    *,
    settings: hsettings | None = None,
    search: Search = Search(),  # noqa: B008 - frozen: one default shared by every call is safe
) -> Tally:
    """Fuzz ``check`` on ``target`` at ``config`` (a FuzzConfig; default: the
    defaults, since the environment is the drivers' to read) under Hypothesis's
    ``settings``; raise FuzzFailure with the shrunk case on failure.

    Each drawn case is run at ``config.variants`` value-and-probe seeds
    (Case.reseeded): Hypothesis's cost is in the structure, and bugs that
    depend on values get more tries for it. Each Hypothesis example is a
    list of ``structures // 2`` (at least 1) to ``structures`` drawn cases: an
    example costs a fixed amount beyond its draws (the engine's bookkeeping,
    and the caches Hypothesis and torch evict from each other), which several
    structures share. Shrinking deletes the cases a failure does not need,
    down to that minimum; the others shrink to the plainest case, and the
    failure reported is the one failing case. A structure Hypothesis copied
    within an example runs the next variants. ``config.seed`` makes the run
    reproducible; the failure carries the run's tally. With a
    ``config.corpus`` (a directory) the shrunk failure is written there as a
    record, and each example is journaled first (fuzzdiff.record.journal): a
    case that kills the process becomes a "crash" record at the next
    ``recover(corpus)``, which this function runs first (unless
    ``config.recover_crashes`` is False); without one, ``config.journal_dir``
    journals them.

    ``config.timeout`` (seconds per example, COMPILE_TIMEOUT_FACTOR times
    that for a check that compiles; 0 disables) stops a hanging example:
    reported at once, unshrunk, as a FuzzFailure of kind "timeout"
    (fuzzdiff.guards.timeout says what is covered). ``config.shrink_seconds``
    bounds shrinking: that long after the first failure, examples not yet
    seen failing pass unrun, so Hypothesis ends with the smallest failure
    found so far; the failure's ``shrink_cut`` says so.

    ``search`` (a Search) says the rest. With ``search.fresh`` the shrunk
    failure is rerun in a fresh process before it is reported or
    recorded: one that passes there is this process's state, not the
    target's, and ends the run as "inconclusive" (naming what disturbed this
    process) rather than as a failure. The failure carries whose bug it is
    (fuzzdiff.search.blame), found there, or here without one. A failure
    that matches one of ``search.seen`` is counted, not raised, so that the
    run looks for another. ``search.until`` ends the search before the next
    case, with the tally so far (``Tally.cut``, ``Tally.cut_reason``); a
    failure found before it is shrunk until then (at least MIN_SHRINK
    seconds) and reported as always. ``search.deadline`` stops the case in
    flight when the clock passes it (fuzzdiff.guards.timeout's soft layer,
    where it can run: the main thread), unjudged; a case that would pass it
    at the last case's cost is not begun, and shrinking ends SETTLING_CASES
    failing cases' cost before it (the smallest failure so far is the one
    settled). A failure whose rerun in a fresh process has not answered by
    ``search.settle_by`` is not confirmed, so not raised; it is returned in
    the tally's ``unconfirmed``, its runs counted inconclusive. So is a
    mismatch whose confirmation (fuzzdiff.confirm.ladder) runs past the
    search's time budget and CONFIRM_MIN seconds from its case's start: the
    search ends there, and the checks after it keep their time.

    Runs rejected as outside the target's domain (``Target.invalid``, a
    ``reject()`` of the target's) are counted apart (``Tally.rejected``,
    with their empty dims); ``Tally.cases`` counts the judged cases, those
    with a run that was neither rejected nor unsupported. Where every run was
    rejected, AllRejected (Hypothesis's Unsatisfiable) carries the tally.
    """
    config = config or FuzzConfig()
    variants, structures, corpus = config.variants, config.structures, config.corpus
    seen, until, deadline = search.seen, search.until, search.deadline
    check = (get_check(check) if isinstance(check, str) else check).configured(config)
    # A first inductor compile of a three-input op took 25-35 s on two busy
    # cores (opinfo/diff@63): slowness, not a hang, must not be a time-out.
    timeout = float(config.timeout * (COMPILE_TIMEOUT_FACTOR if check.compiles else 1))
    target = validate(get_target(target) if isinstance(target, str) else target)
    tally = Tally()
    why = check.why_not(target)
    if why is not None:
        tally.add(Verdict("unsupported", why))
        return tally

    journal: Journal | None = None
    watch: Watchdog | None = None
    inflight: list[Case | None] = [None]  # the variant running, for a soft timeout's report
    # a mismatch whose confirmation ran past its allowance: the variant, and the finding
    confirming: list[tuple[Case, Verdict] | None] = [None]
    shrink = _ShrinkBound(config.shrink_seconds, until, deadline)
    budget = _TimeBudget(until, deadline)
    failing: Counter[Empty] = Counter()  # the failure's own failing runs (FuzzFailure.failing)
    failing_cases = [0]

    def empty(case: Case) -> Empty:
        return empty_dims(target.args, [a.shape for a in case.args])

    toured = tour_classes(check, target, dict(config.case_options), search.tour) if search.tour else ()
    toured = toured[: search.tour_cases]
    examples = (
        tour_strategy(check, target, dict(config.case_options), toured)
        if toured
        else example_structures(case_strategy(check, target, **config.case_options), structures)
    )
    drawing = [examples]  # a tour no random draw fits falls back to the simplest (run_property)
    if toured:
        examples = st.just(None).flatmap(lambda _: drawing[0])

    @given(examples)
    def property_(cases: list[Case]) -> None:
        shrink.end_if_over(cases)
        seen_failing = shrink.seen_failing(cases)
        if seen_failing is not None:  # the same cases, drawn by another choice sequence: not run again
            _fail(check.name, target.name, *seen_failing)
        best: float | None = None  # the closest call of the example, for hypothesis.target
        outside = 0  # cases of a tour rejected as outside the target's domain
        try:
            for i, case in enumerate(cases):
                budget.check()
                began = time.monotonic()
                # Hypothesis's mutator copies structures within an example (about
                # one in ten here): a copy runs the next variants, not the same ones.
                first = variants * cases[:i].count(case)
                judged = bool(first)  # a copy's case was counted with the first of its runs
                if journal is not None:
                    journal.end()  # idle while the next case is written
                    journal.begin_case(case)
                if not first:
                    tally.drawn += 1
                    tally.features |= case_features(case)
                for k in range(first, first + variants):
                    variant = inflight[0] = case.reseeded(k)
                    doomed = crashing(target.known, check.name, variant) if target.known else None
                    if doomed is not None:  # a known torch crash: not run, counted as known
                        tally.add_known(doomed, Verdict("crash", doomed.reason))
                        tally.cases += not judged
                        judged = True
                        continue
                    if journal is not None:
                        journal.begin(k)
                    if watch is not None:
                        watch.start()
                    try:
                        with confirming_by(_allowance(until, deadline, began)):
                            verdict = verdict_at(check, target, variant)
                    except ConfirmationCut as cut:
                        finding = cut.finding or Verdict("fail", "a finding whose confirmation was cut short")
                        confirming[0] = (variant, finding)
                        raise OutOfTime(
                            f"its time ended while a failure found was confirmed (at least {CONFIRM_MIN:.0f} s)"
                        ) from None
                    except UnsatisfiedAssumption:  # outside the target's domain: a draw rejected, not judged
                        tally.rejected += 1
                        tally.rejected_empty[empty(case)] += 1
                        if not toured:
                            raise
                        # a class the target refuses (an op that takes contiguous inputs
                        # only) leaves the tour's other classes to run
                        outside += 1
                        break
                    if watch is not None:
                        watch.stop()
                    newly = verdict.kind != "unsupported" and not judged  # the case's first judged run
                    tally.cases += newly
                    judged = judged or newly
                    if verdict.kind != "unsupported" and not verdict.failed:
                        tally.judged_empty.update(empty(case))  # sizes it takes (a failure may be a reject yet)
                    known = matching(target.known, check.name, variant, verdict) if target.known else None
                    if known is not None:
                        tally.add_known(known, verdict)
                        continue
                    tally.add(verdict)
                    again = matching(seen, check.name, variant, verdict) if seen else None
                    if again is not None:  # a failure the caller has reported: look for another
                        tally.repeats[again.reason] += 1
                        continue
                    if verdict.failed:
                        budget.disarm()
                        if search.fresh is not None and not shrink.failing:
                            search.fresh.boot()  # started while the failure shrinks: its rerun waits less
                        failing[empty(case)] += 1
                        failing_cases[0] += newly
                        shrink.failed(cases, variant, verdict, time.monotonic() - began)
                        _fail(check.name, target.name, variant, verdict)
                    score = _score(verdict)
                    if score is not None and (best is None or score > best):
                        best = score
                budget.took(time.monotonic() - began)
            if toured and outside == len(cases):
                raise UnsatisfiedAssumption("every case of the tour lay outside the target's domain")
        finally:
            # Idle once per example, not per variant: between variants only
            # this loop's bookkeeping runs, nothing that could kill the process.
            if watch is not None:
                watch.stop()
            if journal is not None:
                journal.end()
            if best is not None:
                tally.closest = max(tally.closest, best)
                # Once per example: a second hypothesis.target() with the same label raises.
                hypothesis.target(best, label="normalized error")

    # One example-database key per (check, target): every fuzz() call shares the
    # source of property_, and saved failures must be tried again only where they failed.
    # (``.hypothesis`` is the handle @given attaches; hypothesis types the test as a plain callable)
    property_.hypothesis.inner_test._hypothesis_internal_add_digest = (  # type: ignore[attr-defined]
        f"{check.name}/{target.ref}".encode()
    )
    # No deadline unless asked for: an example runs several structures at every
    # variant, and a hang is the per-example timeout's job.
    property_ = (hsettings(deadline=None) if settings is None else settings)(property_)
    if config.seed is not None:
        property_ = hypothesis.seed(config.seed)(property_)

    def run_property() -> None:
        try:
            property_()
        except Unsatisfiable:
            if not toured or tally.drawn or tally.rejected:
                raise
            # no random tour fit the target's draws, and nothing was run: the simplest one does
            drawing[0] = tour_strategy(check, target, dict(config.case_options), toured, beyond_simplest=False)
            property_()

    if corpus is not None and config.recover_crashes:
        recover(corpus)
    try:
        journaled = corpus if corpus is not None else config.journal_dir
        if journaled is not None:
            journal = Journal(journaled, check.name, target.name, timeout)
        if timeout > 0 or deadline is not None:
            watch = Watchdog(timeout, None if journal is None else journal.hang_path, deadline=deadline)
        try:
            with torch_state.run(), torch_logs(config.capture_logs) as logs:
                try:
                    run_property()
                except OutOfTime as late:
                    smallest = shrink.smallest()
                    if smallest is not None:  # stopped while it shrank: the smallest failure so far
                        shrink.cut = True
                        _fail(check.name, target.name, *smallest)
                    tally.cut, tally.cut_reason = True, str(late)
                    if confirming[0] is not None:  # found, not confirmed: said, with its case
                        unconfirmed = FuzzFailure(check.name, target.name, *confirming[0])
                        unconfirmed.unconfirmed = f"{late}; budget= gives it the time to confirm or dismiss it"
                        tally.add(
                            Verdict("inconclusive", "a failure found, not confirmed before its check's time ended")
                        )
                        tally.unconfirmed.append(unconfirmed)
                except Unsatisfiable:
                    if tally.rejected:
                        raise AllRejected(tally) from None
                    raise
                finally:
                    tally.logs.update(logs)
        except ExampleTimeout as stop:
            # Not shrunk: every shrink step of a hang would cost a full timeout.
            verdict = Verdict(
                "timeout",
                f"{stop}: stopped by the per-example timeout (FuzzConfig.timeout or $FUZZDIFF_TIMEOUT)",
                {"timeout": timeout},
            )
            tally.add(verdict)
            timed_out = inflight[0]
            assert timed_out is not None  # the watchdog runs only around a variant's run
            failing[empty(timed_out)] += 1
            raise FuzzFailure(check.name, target.name, timed_out, verdict) from None
        except FlakyFailure as group:
            # The failure did not reproduce every time (e.g. a kernel reading
            # uninitialized memory): still a confirmed failure of one case.
            inner = next((e for e in group.exceptions if isinstance(e, FuzzFailure)), None)
            if inner is None:
                raise
            raise inner from group
    except FuzzFailure as failure:
        failure.tally = tally
        failure.shrink_cut = shrink.cut
        failure.failing, failure.failing_cases = failing, failing_cases[0]
        if watch is not None:  # no example runs here any more: the reruns elsewhere have limits of their own
            watch.close()
        try:
            settled = settle(failure, check, target, search.definition, search.fresh, timeout, seen, search.settle_by)
        except OutOfTime as late:
            # Found, but not confirmed: no failure to report. Said, with its case, in the tally.
            failure.tally, failure.unconfirmed = None, str(late)
            tally.set_aside(failure, "inconclusive", "a failure found, not confirmed before the time budget ended")
            tally.unconfirmed.append(failure)
            tally.cut = True
            tally.cut_reason = tally.cut_reason or "it ended while a failure found was settled"
            return tally
        if not settled:
            return tally  # this process's state, not the target's: an inconclusive run
        if corpus is not None:
            whose = None if failure.blame is None else failure.blame.to_json()
            standin = stand_in_record(corpus, failure, target)
            if standin is not None and whose is not None:
                whose["stand_in_record"] = standin  # its script is torch-only
            failure.record_path, failure.record_created = write_record(
                corpus, failure.check, failure.case, failure.verdict, definition=search.definition, blame=whose
            )
        raise
    finally:
        if watch is not None:
            watch.close()
        if journal is not None:
            journal.close()
    return tally
