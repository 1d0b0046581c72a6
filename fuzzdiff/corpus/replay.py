"""What each record of a corpus shows on the running torch.

``fuzzdiff corpus replay`` replays every record and sorts it: an open one is
still failing, fixed (it passes now), changed (it fails otherwise), or cannot
be rebuilt (its target or inputs no longer load); a fixed one stays fixed or is
back; an expected one is as expected or changed. ``--mark`` writes what it
found: a record fixed here becomes ``fixed`` in this release (``fixed_in``),
and one that is back becomes ``open`` again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from fuzzdiff.record.files import mark
from fuzzdiff.record.format import Record
from fuzzdiff.targets.releases import release
from fuzzdiff.corpus.repro import load, mismatch, replay
from fuzzdiff.verdict import Verdict

__all__ = ["Outcome", "outcome", "evidenced", "mark_outcome", "NEWS"]

# outcomes that ask for a look: a failure that changed, a fix undone, a record that no longer loads
NEWS = ("changed", "back", "cannot be rebuilt")


@dataclass(frozen=True)
class Outcome:
    kind: str  # still failing, fixed, changed, back, still fixed, as expected, cannot be rebuilt, not run
    detail: str = ""
    verdict: Verdict | None = None


def evidenced(
    record: Record, verdict: Verdict, *, trust_source: bool = False, allow_import: Iterable[str] = ()
) -> bool:
    """The recorded failure and its replay both match the signature of a known
    discrepancy that lists this record: another face of the same bug (one that
    reads memory outside its input fails one identity or the other). The
    target is the record's, as its replay rebuilds it (an OpInfo record's from
    its stored sample)."""
    try:
        _, target = load(record, trust_source=trust_source, allow_import=allow_import)
    except Exception:  # noqa: BLE001 - a target that does not load is the mismatch's to report
        return False
    return any(
        record.id in k.records
        and k.matches(record.check, record.case, record.verdict)
        and k.matches(record.check, record.case, verdict)
        for k in target.known
    )


def outcome(record: Record, *, trust_source: bool = False, allow_import: Iterable[str] = ()) -> Outcome:
    """Replay ``record`` here and say what that shows, by its status on this torch."""
    if record.case.device.startswith("cuda") and not torch.cuda.is_available():
        return Outcome("not run", "a CUDA record; this machine has no GPU")
    allow = tuple(allow_import)
    try:
        verdict = replay(record, trust_source=trust_source, allow_import=allow)
        status = record.status_on()
        for _ in range(2):  # a kernel reading memory outside its input fails only some of the time
            if status != "open" or verdict.kind not in ("pass", "inconclusive"):
                break
            verdict = replay(record, trust_source=trust_source, allow_import=allow)
    except Exception as e:  # noqa: BLE001 - its target or inputs no longer load here
        return Outcome("cannot be rebuilt", f"{type(e).__name__}: {e}".splitlines()[0])
    if status == "fixed":
        if verdict.kind == "pass":
            return Outcome("still fixed", verdict=verdict)
        return Outcome("back", f"fixed in {record.fixed_in}, fails again: {verdict}", verdict)
    why = mismatch(record.verdict, verdict)
    if why is None or (status == "open" and evidenced(record, verdict, trust_source=trust_source, allow_import=allow)):
        return Outcome("still failing" if status == "open" else "as expected", verdict=verdict)
    if status == "open" and verdict.kind == "pass":
        return Outcome("fixed", f"passes on torch {release()}", verdict)
    return Outcome("changed", why, verdict)


def mark_outcome(record: Record, found: Outcome) -> str | None:
    """Write what ``found`` shows into the record's file; what changed, or None."""
    if found.kind == "fixed":
        mark(record, "fixed", release())
        return f"status fixed, fixed_in {release()}"
    if found.kind == "back":
        mark(record, "open")
        return "status open again"
    return None
