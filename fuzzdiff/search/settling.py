"""A failure found, settled before it is reported: rerun in a fresh
process (this process's state, or the target's? a hang, or slow code?) and
blamed, PyTorch's or the code's (fuzzdiff.search.blame), with a record of the
plain-torch stand-in where the blame rests on it. A failure blamed on the
code is then localized (fuzzdiff.search.localize): the torch op, the code's
own rule or the composition. Within a time budget (``fuzzdiff.check``'s),
by an instant: a failure whose rerun does not answer by then is not
confirmed (OutOfTime), and evidence gathered or localizing done here is cut
short there, and says so."""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from fuzzdiff.case.case import Case
from fuzzdiff.checks import Check
from fuzzdiff.guards import torch_state
from fuzzdiff.guards.aten_trace import AtenTrace, trace_call
from fuzzdiff.guards.timeout import OutOfTime, bounded
from fuzzdiff.record.files import write_record
from fuzzdiff.search.blame import USER, Evidence, blame, gather, located, torchs_op
from fuzzdiff.search.fresh import FreshProcess
from fuzzdiff.search.localize import NUMERIC, localize
from fuzzdiff.search.outcome import FuzzFailure
from fuzzdiff.targets.known import Known, matching
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict, identity, mismatch

__all__ = ["settle", "stand_in_record", "SLOW_FACTOR"]

SLOW_FACTOR = 5  # a timed-out example gets this many times its time in a fresh process, to tell slow from hung


def settle(
    failure: FuzzFailure,
    check: Check,
    target: Target,
    definition,
    fresh: FreshProcess | None,
    timeout: float = 0.0,
    seen: tuple[Known, ...] = (),
    settle_by: float | None = None,
) -> bool:
    """Confirm ``failure`` outside this process and find whose bug it is;
    False when it is this process's state rather than the target's, or a
    time-out of an example that only takes long (then its tally says so, as
    inconclusive runs). OutOfTime where ``settle_by`` (a time.monotonic()
    instant) comes before its rerun in a fresh process has answered: not
    confirmed, it is no failure to report."""
    verdict = failure.verdict
    if verdict.kind == "timeout" and fresh is not None and timeout > 0:
        # A hang, or slow code on busy cores? Given SLOW_FACTOR times as long in a fresh process.
        seconds = _seconds(SLOW_FACTOR * timeout, settle_by)
        rerun = fresh.rerun(check.name, failure.case, verdict, definition, seconds=seconds, by=settle_by)
        if rerun.late:
            raise OutOfTime(f"the time budget ended before its rerun in a fresh process finished ({seconds:.1f} s)")
        if rerun.verdict is not None:
            if rerun.verdict.failed:  # slow, and wrong: that failure is the finding, unless already counted
                if _counted(failure, check, target, rerun.verdict, seen):
                    return False
                failure.verdict, failure.blame = rerun.verdict, rerun.blame
                failure.elsewhere = f"found in a fresh process, where the example ran past the {timeout:.0f} s time-out"
                return True
            why = (
                f"slow, not hung: past the per-example time-out of {timeout:.0f} s, but it finishes in a fresh "
                f"process ({rerun.verdict.kind}); timeout= (FuzzConfig.timeout) gives it longer"
            )
            _not_the_targets(failure, why)
            return False
        failure.elsewhere = f"it does not finish in a fresh process either ({rerun.failed})"
    if verdict.kind != "fail":  # a crash is not rerun here: the journal's record replays it in a child
        failure.blame = blame(check.name, target, verdict, Evidence())
        return True
    if fresh is not None:
        seconds = _seconds(fresh.timeout, settle_by)
        rerun = fresh.rerun(
            check.name, failure.case, verdict, definition, seconds=seconds, confirmed=True, by=settle_by
        )
        if rerun.late:
            raise OutOfTime(f"the time budget ended before its rerun in a fresh process answered ({seconds:.1f} s)")
        if rerun.verdict is not None and mismatch(verdict, rerun.verdict) is not None:
            before = torch_state.last_disturbance()
            what = verdict.errors.get("exception") or identity(verdict)
            kind = rerun.verdict.kind
            why = f"process-state dependent: {what} fails here, but reruns as {kind} in a fresh process"
            _not_the_targets(failure, why, f" (this process was disturbed before: {before})" if before else "")
            return False
        if rerun.verdict is not None:
            failure.elsewhere = "reproduced in a fresh process"
            failure.blame, failure.evidence = rerun.blame, dict(rerun.evidence or {})
            _localized(failure, check, target, settle_by)
            return True
        failure.elsewhere = f"not rerun in a fresh process ({rerun.failed})"
    try:
        with bounded(settle_by):
            evidence = gather(check, target, failure.case, verdict)
    except OutOfTime:
        said = "whose bug it is is not settled: the time budget ended while the evidence was gathered"
        failure.elsewhere = f"{failure.elsewhere}; {said}" if failure.elsewhere else said
        return True
    failure.blame, failure.evidence = blame(check.name, target, verdict, evidence), evidence.to_json()
    _localized(failure, check, target, settle_by)
    return True


def _localized(failure: FuzzFailure, check: Check, target: Target, settle_by: float | None) -> None:
    """A failure blamed on the code, localized (fuzzdiff.search.localize) by
    ``settle_by``: to an op of torch's (then PyTorch's), a rule of the
    code's, or the composition. A failure of torch's own target is named
    down to its op: the aten op or rule that fails alone, else the torch
    function the target is."""
    whose, verdict = failure.blame, failure.verdict
    if whose is None or whose.level is not None:
        return
    # a mismatch of two of torch's ways of running the code has no op of it to run alone
    alone = check.name in NUMERIC or bool(verdict.errors.get("exception"))
    if target.torchs_own:
        found = localize(check, target, failure.case, verdict, settle_by) if alone else None
        named = found is not None and found.level in ("op", "rule")
        called = () if named or target.torch_function is not None else _ops_called(target, failure.case)
        failure.blame = torchs_op(whose, target, found, called)
    elif whose.whose == USER and alone:
        failure.blame = located(whose, localize(check, target, failure.case, verdict, settle_by))


def _ops_called(target: Target, case: Case) -> tuple[str, ...]:
    """The aten ops that compute in a plain call of ``target`` at ``case``, in
    order (no views, no factories): what a wrapper of torch ops names."""
    trace: AtenTrace | None
    try:
        with torch.no_grad():
            trace, _ = trace_call(target.fn, case.materialize(requires_grad=False).args, dict(case.kwargs))
    except Exception as e:  # noqa: BLE001 - the call raising: its trace up to there still names the ops
        trace = getattr(e, "aten_trace", None)
    if trace is None:
        return ()
    out: list[str] = []
    for op in trace.ops:
        returns = op.op._schema.returns
        view = bool(returns) and returns[0].alias_info is not None and not returns[0].alias_info.is_write
        if op.inputs and not view and op.name not in out:
            out.append(op.name)
    return tuple(out)


def _seconds(wait: float, settle_by: float | None) -> float:
    """How long a rerun may take: ``wait``, or what is left before
    ``settle_by`` where that is less; OutOfTime where nothing is."""
    if settle_by is None:
        return wait
    left = settle_by - time.monotonic()
    if left <= 0:
        raise OutOfTime("no time was left of the time budget to rerun it in a fresh process")
    return min(wait, left)


def _counted(failure: FuzzFailure, check: Check, target: Target, verdict: Verdict, seen: tuple[Known, ...]) -> bool:
    """Whether a timed-out example's failure, found in a fresh process, is a known
    discrepancy or one the caller has reported: then the run's time-out counts
    as that, as the same failure here would have."""
    tally = failure.tally
    assert tally is not None
    known = matching(target.known, check.name, failure.case, verdict) if target.known else None
    again = None if known is not None or not seen else matching(seen, check.name, failure.case, verdict)
    if known is None and again is None:
        return False
    tally.counts["timeout"] -= 1
    if tally.counts["timeout"] <= 0:
        del tally.counts["timeout"]
    if known is not None:
        tally.add_known(known, verdict)
    elif again is not None:
        tally.repeats[again.reason] += 1
    return True


def _not_the_targets(failure: FuzzFailure, why: str, detail: str = "") -> None:
    """Count the run's failing examples as inconclusive, for ``why``."""
    tally = failure.tally
    assert tally is not None
    for kind in ("fail", "timeout"):
        tally.counts["inconclusive"] += tally.counts.pop(kind, 0)
    tally.reasons["inconclusive"] = why + detail
    tally.why[("inconclusive", why)] += 1


def stand_in_record(corpus, failure: FuzzFailure, target: Target) -> str | None:
    """Where the blame rests on the stand-in (fuzzdiff.search.blame), its failure as a
    record of its own, whose script is the torch-only repro to file; its path."""
    if failure.blame is None or failure.blame.via != "stand-in" or not failure.evidence:
        return None
    shown = failure.evidence.get("stand_in") or {}
    source, verdict = shown.get("source"), shown.get("verdict")
    if not isinstance(source, dict) or not isinstance(verdict, dict):
        return None
    name = f"{target.name}.stand_in"
    definition = {
        "fn": name,
        "spec": target.spec,
        "domain": {k: list(v) for k, v in target.domain.items()},
        "dtypes": [str(d).removeprefix("torch.") for d in target.dtypes],
        "functional": True,
        "source": source,
    }
    path, _ = write_record(
        corpus,
        failure.check,
        replace(failure.case, target=name),
        Verdict(verdict["kind"], verdict["message"], verdict.get("errors") or {}),
        definition=definition,
        blame={"whose": "pytorch", "evidence": shown.get("description", "a plain-torch stand-in"), "via": "stand-in"},
    )
    return str(path)
