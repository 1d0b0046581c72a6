"""Known PyTorch discrepancies, each matched by its own signature.

A target that trips over a torch bug must still be able to go red on a new
one. So a known discrepancy never covers a whole (target, check) pair: it
names the exception (its type and a message pattern) or, for a wrong value,
the input features and check parameters that trigger it, and the corpus
records that evidence it. A confirmed failure is known only when it matches
one of its target's signatures; anything else is a new failure, whatever its
pair. A failure's crash or time-out is never known: nothing about it is
confirmed. A torch bug that kills the process is the one exception, declared
with ``crash=True``: it is matched on the inputs alone, before the case runs
(a process that died can no longer count anything), so its signature must be
as narrow as its standalone repro shows.

Not every discrepancy is a bug. One that torch documents, or chose on purpose,
is declared with ``expected`` (the reason, citing the doc or the upstream
decision): it still matches, so a check that reports it stays green, but
docs/pages/discrepancies.md lists it apart from the bugs, corpus root causes
leave it out, and its corpus records have status ``expected``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from fuzzdiff.case.case import Case
from fuzzdiff.case.features import arg_features, case_features, relaid
from fuzzdiff.targets.releases import RELEASE, fixed_by
from fuzzdiff.verdict import Verdict, headline

__all__ = ["Known", "matching", "crashing", "NOT_NONE"]

NOT_NONE = "<not None>"  # a params condition: the entry is present and not None


@dataclass(frozen=True)
class Known:
    """One torch discrepancy, as the failures it explains look.

    checks:   the checks that can report it (one check's name alone stands for
              a tuple of it).
    reason:   what torch does wrong, and under which torch.
    evidence: a standalone torch snippet that shows it.
    raises:   the exception's type name; None for a wrong value (then only
              value mismatches match).
    message:  a regex searched in the failure's message, or in its headline
              (fuzzdiff.verdict.headline: a wrapped error's own first line).
    features: input features (fuzzdiff.case.features) the failing case must all
              have; "a|b" accepts either, and "1:stride0" is argument 1's own;
              "value:zero" asks the values themselves (VALUE_FEATURES).
    params:   conditions on the case's check parameters: a dotted path into
              ``case.params`` (list items by index; "kwargs." for the
              target's keyword arguments) -> the value it must have, a tuple
              of allowed values, or NOT_NONE.
    dtypes:   case dtypes it appears in (empty: any).
    records:  ids of the corpus records that evidence it.
    crash:    the discrepancy kills the process: matching cases are not run.
    fixed_in: the first torch release without it; from there on it matches
              nothing, so a fixed bug that comes back is a new failure.
    expected: why it is intended behaviour, not a bug (a documented limit or
              an upstream decision, cited); empty for a bug.
    """

    checks: tuple[str, ...] | str  # a str becomes (str,) in __post_init__
    reason: str
    evidence: str
    raises: str | None = None
    message: str = ""
    features: tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    dtypes: tuple[str, ...] = ()
    records: tuple[str, ...] = ()
    crash: bool = False
    fixed_in: str | None = None
    expected: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.checks, str):
            object.__setattr__(self, "checks", (self.checks,))
        if not (self.reason.strip() and self.evidence.strip()):
            raise ValueError(f"a known discrepancy needs a reason and evidence: {self.reason!r}")
        if self.raises is not None and not self.raises.isidentifier():
            raise ValueError(f"raises must name an exception type, got {self.raises!r}")
        if self.crash and (self.raises or self.message or not (self.features or self.params)):
            raise ValueError(
                f"a known crash is matched on its inputs: give the features or params "
                f"that trigger it, no exception or message: {self.reason!r}"
            )
        if self.raises is not None and not self.message:
            raise ValueError(f"a known {self.raises} needs a message pattern: {self.reason!r}")
        re.compile(self.message)
        if self.fixed_in is not None and not RELEASE.fullmatch(self.fixed_in):
            raise ValueError(f"fixed_in names a torch release such as '2.14.1', got {self.fixed_in!r}")
        if self.expected and (self.crash or self.fixed_in is not None):
            # A process that dies is never intended, and a convention torch drops
            # is a signature to delete, not a fix.
            raise ValueError(f"an expected discrepancy is neither a crash nor fixed in a release: {self.reason!r}")
        if not (self.message or self.features or self.params or self.dtypes):
            # With no condition it would cover the whole pair again.
            raise ValueError(
                f"a known discrepancy needs a message pattern, features, params or "
                f"dtypes that single it out: {self.reason!r}"
            )

    @property
    def bug(self) -> bool:
        """Whether it is a torch bug, not a convention or a documented limit."""
        return not self.expected

    @property
    def present(self) -> bool:
        """Whether the running torch still has it."""
        return self.fixed_in is None or not fixed_by(self.fixed_in)

    def matches(self, check: str, case: Case, verdict: Verdict) -> bool:
        if self.crash or check not in self.checks or verdict.kind != "fail" or not self.present:
            return False
        raised = verdict.errors.get("exception") if isinstance(verdict.errors, Mapping) else None
        if raised != self.raises:
            return False
        if self.message and not (
            re.search(self.message, verdict.message, re.S) or re.search(self.message, headline(verdict.message))
        ):
            return False
        # The layout check runs the case in two layouts: a discrepancy between
        # them may lie in either, so a feature of either counts.
        return self._triggered_by(case) or (check == "layout" and self._triggered_by(relaid(case)))

    def crashes(self, check: str, case: Case) -> bool:
        """A known crash: ``case`` has the inputs that kill the process."""
        return self.crash and check in self.checks and self.present and self._triggered_by(case)

    def _triggered_by(self, case: Case) -> bool:
        if self.dtypes and case.dtype not in self.dtypes:
            return False
        if self.features and not all(any(_has(case, f) for f in alt.split("|")) for alt in self.features):
            return False
        return all(
            _holds(_lookup({**case.params, "kwargs": case.kwargs}, path), want) for path, want in self.params.items()
        )

    def describe(self) -> str:
        """One line: what it is, and where its evidence lies."""
        records = f" (records {', '.join(self.records)})" if self.records else ""
        intended = f" [intended, not a bug: {self.expected}]" if self.expected else ""
        return f"{self.reason}{intended}{records}"


def matching(known: Iterable[Known], check: str, case: Case, verdict: Verdict) -> Known | None:
    """The known discrepancy that explains this failure, if any."""
    return next((k for k in known if k.matches(check, case, verdict)), None)


def crashing(known: Iterable[Known], check: str, case: Case) -> Known | None:
    """The known crash that ``case`` would trigger, if any: not to be run."""
    return next((k for k in known if k.crashes(check, case)), None)


def _has(case: Case, feature: str) -> bool:
    if feature in VALUE_FEATURES:
        return VALUE_FEATURES[feature](case)
    index, _, name = feature.partition(":") if feature[:1].isdigit() else ("", "", feature)
    if not index:
        return feature in case_features(case)
    i = int(index)
    return i < len(case.args) and name in arg_features(case.args[i])


def _exact_zero(case: Case) -> bool:
    args = case.materialize(requires_grad=False).args
    return any(isinstance(a, torch.Tensor) and a.numel() and bool((a == 0).any()) for a in args)


# Features of the values themselves, found by making them (only where a signature
# asks): an exact zero comes from the zeros or all_zero structures, or from a
# value grid through 0, and a bug at zero is met by each.
VALUE_FEATURES: dict[str, Callable[[Case], bool]] = {"value:zero": _exact_zero}

_MISSING = object()


def _lookup(params: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(params, Mapping):
            params = params.get(part, _MISSING)
        elif (
            isinstance(params, (list, tuple)) and part.lstrip("-").isdigit() and -len(params) <= int(part) < len(params)
        ):
            params = params[int(part)]
        else:
            return _MISSING
        if params is _MISSING:
            return _MISSING
    return params


def _holds(value: Any, want: Any) -> bool:
    if value is _MISSING:
        return False
    if want == NOT_NONE:
        return value is not None
    if isinstance(want, tuple):
        return any(_holds(value, w) for w in want)
    return value == want
