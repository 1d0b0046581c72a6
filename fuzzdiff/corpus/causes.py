"""Records grouped into root causes, so that one bug seen in many records
counts once.

A record listed by a known discrepancy (``Known.records``) belongs to that
discrepancy. Any other record gets an automatic signature: the op (an OpInfo
sample's op, whatever the sample), the check, what failed (an exception's
type and its message with the numbers left open, or the identity a wrong
value breaks) and the input features that trigger it (a structure, a layout,
aliasing, an empty input: fuzzdiff.search.root_cause.TRIGGERS).

A record of status ``expected``, or one that an expected signature lists
(``Known.expected``: a convention or a documented limit), shows no bug, so it
belongs to no root cause: ``conventions`` groups those apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from fuzzdiff.case.features import case_features
from fuzzdiff.targets.known import Known
from fuzzdiff.record.format import Record
from fuzzdiff.search.root_cause import is_trigger, message_pattern
from fuzzdiff.verdict import Verdict, identity

__all__ = ["Cause", "root_causes", "conventions", "op_of", "severity"]


@dataclass
class Cause:
    """One root cause: how it is told apart, and the records that show it."""

    name: str
    known: Known | None = None
    records: list[Record] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """Its first record's severity."""
        return severity(self.records[0].verdict)


def severity(verdict: Verdict) -> str:
    """silent (a wrong value, no error), loud (an exception), crash or timeout."""
    if verdict.kind in ("crash", "timeout"):
        return verdict.kind
    return "loud" if verdict.errors.get("exception") else "silent"


def op_of(target: str) -> str:
    """The op a target exercises: ``opinfo/linalg.qr@3`` -> ``linalg.qr``."""
    return target.removeprefix("opinfo/").split("@")[0]


def _automatic(record: Record) -> str:
    verdict = record.verdict
    exception = verdict.errors.get("exception")
    if verdict.kind in ("crash", "timeout"):
        what = verdict.kind
    elif exception:
        what = f"{exception}: {message_pattern(verdict.message).removeprefix('^')}"
    else:
        what = identity(verdict)
    triggers = sorted(f for f in case_features(record.case) if is_trigger(f))
    return f"{op_of(record.target)} | {record.check} | {what}" + (f" | {', '.join(triggers)}" if triggers else "")


def root_causes(records: Iterable[Record], known: Sequence[Known]) -> list[Cause]:
    """The records' root causes, the largest first: the bugs, without the
    expected records and those of expected signatures."""
    return _grouped(records, known, bugs=True)


def conventions(records: Iterable[Record], known: Sequence[Known]) -> list[Cause]:
    """The expected records and those of expected signatures, grouped as
    root causes are, the largest first."""
    return _grouped(records, known, bugs=False)


def _grouped(records: Iterable[Record], known: Sequence[Known], bugs: bool) -> list[Cause]:
    listed = {rid: k for k in known for rid in k.records}
    causes: dict[object, Cause] = {}
    for record in records:
        k = listed.get(record.id)
        if (record.status != "expected" and (k is None or k.bug)) != bugs:
            continue
        key: object = id(k) if k is not None else _automatic(record)
        if key not in causes:
            name = k.reason.split(":")[0].split(";")[0][:100] if k is not None else str(key)
            causes[key] = Cause(name, k)
        causes[key].records.append(record)
    return sorted(causes.values(), key=lambda c: (-len(c.records), c.name))
