"""A failure's root cause, as a signature its other failures match.

``fuzzdiff.check`` goes on after a failure, looking for another (one bug must
not hide the next), and counts the same root cause's later failures rather
than reporting each: a signature as the known discrepancies are matched
(fuzzdiff.targets.known), made from the failure itself. Not so narrow that every
shape of one error is a new finding, nor so wide that a second bug in the
same derivative passes for the first.
"""

from __future__ import annotations

import math
import re

from fuzzdiff.case.case import Case
from fuzzdiff.case.features import case_features
from fuzzdiff.case.layout import Layout
from fuzzdiff.checks import Check, get_check
from fuzzdiff.confirm.ladder import repeat_only
from fuzzdiff.search.runner import verdict_at
from fuzzdiff.targets.known import Known
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict, headline, identity, mismatch

__all__ = ["root_cause", "message_pattern", "is_trigger", "TRIGGERS", "LAYOUTS"]

# Features that make a failure's root cause (fuzzdiff.case.features): a structure, a
# layout, aliasing, an empty input; not a size of one or a rank of zero, which
# shrinking reaches on the way to any minimal case.
LAYOUTS = ("stride0", "permuted", "gapped", "offset")
TRIGGERS = ("structure:", *LAYOUTS, "alias:", "nonleaf-view", "empty")


def is_trigger(feature: str) -> bool:
    """A feature of TRIGGERS: by name, or a structure or aliasing by kind (not
    the finer layout classes, stride0:last, which a layout's bug meets or not)."""
    return feature in TRIGGERS or feature.startswith(("structure:", "alias:"))


_NUMBER = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"


def root_cause(check: Check | str, case: Case, verdict: Verdict, target: Target) -> Known:
    """A signature that the same root cause's other failures match: the check,
    the exception's type and message with the numbers and shapes left open,
    or for a mismatch its identity, whether its analytic side is finite, and
    the features of the shrunk ``case`` that trigger it (a structured point,
    aliasing, an empty input; any non-contiguous layout, unless the failure
    stays at the same values laid out contiguously)."""
    name = check if isinstance(check, str) else check.name
    exception = verdict.errors.get("exception")
    reason = f"the same failure as the one reported ({headline(verdict.message)[:120]})"
    if isinstance(exception, str):
        return Known(name, reason, "reported above", raises=exception, message=message_pattern(verdict.message))
    features = {f for f in case_features(case) if is_trigger(f)}
    if features & set(LAYOUTS):
        features -= set(LAYOUTS)
        if not _fails_contiguous(check, case, verdict, target):  # a layout's bug: one cause in any of them
            features.add("|".join(LAYOUTS))
    analytic = verdict.errors.get("analytic")
    finite = not isinstance(analytic, float) or math.isfinite(analytic)
    if ":" not in _first_line(verdict.message):  # a finding in one sentence ("backward changed the values ...")
        message = message_pattern(verdict.message)
    else:
        message = "^" + re.escape(identity(verdict)) + ":" + ("" if finite else r".*analytic (nan|-?inf)\b")
    return Known(name, reason, "reported above", message=message, features=tuple(sorted(features)))


def message_pattern(message: str) -> str:
    """A regex that an exception's message matches at other sizes too: its
    headline (fuzzdiff.verdict.headline) with every number, and every list of
    numbers (a shape), left open."""
    parts = re.split(rf"(\[(?:{_NUMBER}(?:, )?)*\]|{_NUMBER})", headline(message))
    out = []
    for k, part in enumerate(parts):
        if k % 2 == 0:
            out.append(re.escape(part))
        else:
            out.append(r"\[[-\d.e+, ]*\]" if part.startswith("[") else _NUMBER)
    return "^" + "".join(out)


def _fails_contiguous(check: Check | str, case: Case, verdict: Verdict, target: Target) -> bool:
    """The same failure at the case's values, every argument contiguous: the
    mismatch repeated there, its confirmation (at these very values) taken as done."""
    plain = case.with_layouts([Layout.contiguous(a.shape) for a in case.args])
    check = get_check(check) if isinstance(check, str) else check
    try:
        with repeat_only():
            again = verdict_at(check, target, plain)
    except Exception:  # noqa: BLE001 - rejected or malformed there: no evidence either way
        return False
    return mismatch(verdict, again) is None


def _first_line(message: str) -> str:
    return message.splitlines()[0] if message else ""
