"""The checks, by their stable names (DESIGN.md section 3).

A new check is one module defining ``CHECK`` plus one line here.
"""

from __future__ import annotations

from fuzzdiff.checks.check import Check

__all__ = ["Check", "CHECKS", "get_check", "UnknownCheck"]

CHECKS: dict[str, Check] = {}


def _register(check: Check) -> None:
    CHECKS[check.name] = check


class UnknownCheck(KeyError):
    def __str__(self):
        return self.args[0]


def get_check(name: str) -> Check:
    try:
        return CHECKS[name]
    except KeyError:
        raise UnknownCheck(f"unknown check {name!r}; expected one of {', '.join(CHECKS)}") from None


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
