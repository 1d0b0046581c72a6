"""The checks, by their stable names (docs/pages/design.md, contract 3).

A new check is one module defining ``CHECK`` plus one line here.
"""

from __future__ import annotations

from fuzzdiff.checks.check import Check
from fuzzdiff.errors import FuzzdiffError
from fuzzdiff.targets.target import Target

__all__ = ["Check", "CHECKS", "get_check", "UnknownCheck", "validate"]

CHECKS: dict[str, Check] = {}


def _register(check: Check) -> None:
    CHECKS[check.name] = check


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


from fuzzdiff.checks import alias, backend, dtype, forward, grad, gradgrad, layout, mutation, opcheck, vmap  # noqa: E402
from fuzzdiff.checks import compile as compile_  # noqa: E402

_register(grad.CHECK)
_register(forward.CHECK)
_register(gradgrad.CHECK)
_register(layout.CHECK)
_register(alias.CHECK)
_register(mutation.CHECK)
_register(dtype.CHECK)
_register(vmap.CHECK)
_register(opcheck.CHECK)
from fuzzdiff.checks import per_sample  # noqa: E402

_register(per_sample.CHECK)
_register(compile_.CHECK)
_register(backend.CHECK)
from fuzzdiff.checks import device  # noqa: E402

_register(device.CHECK)
from fuzzdiff.checks import checkpoint  # noqa: E402

_register(checkpoint.CHECK)
from fuzzdiff.checks import forward2  # noqa: E402

_register(forward2.CHECK)
