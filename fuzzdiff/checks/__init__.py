"""The checks, by their stable names (docs/pages/design.md, contract 3).

A new check is one module defining ``CHECK`` plus one entry in ``CHECKS``'s
tuple, in the order the checks run and are documented in.
"""

from __future__ import annotations

from fuzzdiff.checks import (
    alias,
    backend,
    checkpoint,
    compiled_autograd,
    device,
    dtype,
    export,
    forward,
    forward2,
    grad,
    gradgrad,
    implicit_rsample,
    layout,
    mutation,
    opcheck,
    per_sample,
    vmap,
)
from fuzzdiff.checks import compile as compile_
from fuzzdiff.checks.check import Check
from fuzzdiff.errors import FuzzdiffError
from fuzzdiff.targets.target import Target

__all__ = ["Check", "CHECKS", "get_check", "UnknownCheck", "validate"]

CHECKS: dict[str, Check] = {
    check.name: check
    for check in (
        grad.CHECK,
        forward.CHECK,
        gradgrad.CHECK,
        layout.CHECK,
        alias.CHECK,
        mutation.CHECK,
        dtype.CHECK,
        vmap.CHECK,
        opcheck.CHECK,
        per_sample.CHECK,
        compile_.CHECK,
        backend.CHECK,
        device.CHECK,
        checkpoint.CHECK,
        forward2.CHECK,
        implicit_rsample.CHECK,
        compiled_autograd.CHECK,
        export.CHECK,
    )
}


class UnknownCheck(FuzzdiffError, KeyError):
    def __str__(self):
        return self.args[0]


def get_check(name: str) -> Check:
    try:
        return CHECKS[name]
    except KeyError:
        raise UnknownCheck(f"unknown check {name!r}; expected one of {', '.join(CHECKS)}") from None


def validate(target: Target) -> Target:
    """``target``, once every check it names (allow-list, skips, known
    discrepancies, tolerances) is a registered check: a misspelt name would
    otherwise silently skip nothing, or allow nothing."""
    unknown = sorted(target.check_names() - set(CHECKS))
    if unknown:
        raise UnknownCheck(
            f"target {target.name!r} names unknown check(s) {unknown}; expected names among {', '.join(CHECKS)}"
        )
    return target
