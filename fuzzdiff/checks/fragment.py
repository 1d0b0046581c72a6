"""What a check contributes to a standalone script (docs/pages/corpus.md).

A check states its script beside its identity, in its own module: a function
``script(ctx) -> Fragment`` passed as ``Check(..., script=script)``. The
fragment's body calls the check's own torch-only functions, named in
``copies``: fuzzdiff.script copies them by source, with every module-level
name they refer to, so the script runs the very code that found the failure.
This module is plain data, below the checks, so that a check can build its
fragment without importing the script generator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Fragment", "ScriptContext", "lines"]


class ScriptContext(Protocol):
    """What a fragment may read of the script being written (fuzzdiff.script.Context)."""

    check: str
    case: Any  # fuzzdiff.case.case.Case
    target: Any  # fuzzdiff.targets.target.Target

    @property
    def dtype(self) -> str: ...

    @property
    def wrt(self) -> list[int]: ...

    def wrt_constants(self) -> str: ...


@dataclass(frozen=True)
class Fragment:
    """summary: one line on what is compared (the script's title).
    body:    the statements of ``main()``, indented by four spaces, ending in a return.
    helpers: names from fuzzdiff.script.helpers the body calls.
    copies:  fuzzdiff's own torch-only functions the body calls, copied by source.
    probes:  probe globals the body reads: "V", "V64", "U", "W".
    other_layout: the body also needs ``make_leaves_other``/``make_args_other``
             for the case at the layout check's other layouts.
    forward_ad: the body uses ``fwAD``.
    extra:   module-level code the body needs (after the helpers).
    inputs:  the case's storages, make_leaves and make_args are needed.
    imports: imports the body needs beyond torch and fwAD.
    """

    summary: str
    body: str
    helpers: tuple[str, ...] = ()
    probes: tuple[str, ...] = ()
    other_layout: bool = False
    forward_ad: bool = False
    extra: str = ""
    inputs: bool = True
    imports: tuple[str, ...] = ()
    copies: tuple[Callable[..., Any], ...] = ()


def lines(*statements: str) -> str:
    """``statements`` as the body of ``main()``: each indented by four spaces."""
    return "\n".join("    " + s if s else "" for s in statements)
