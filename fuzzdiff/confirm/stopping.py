"""A derivative rule of the code's own around a loop that stops on its values.

A solver (Newton's method, Broyden's, a fixed-point iteration) runs until a
test on its values passes and returns a root accurate to its tolerance; its
derivative rule is often the implicit function theorem's, the derivative of
the exact root (``1 / (1 - e cos E)`` for Kepler's equation). Finite
differences measure the function as computed, whose slope differs from the
exact root's by about the solver's tolerance (6e-6 relative for xitorch's
rootfinder at its defaults). That is the solver's design, and no magnitude
tells it from a small error of the rule itself.

``stopping_rule`` watches one call for the situation: an
``autograd.Function`` of the code's own in the graph of the outputs, whose
forward reads its tensors' values into Python (``bool(t)``, ``t.item()``,
``torch.allclose``: the ops that hand a tensor's value to Python) at one
place of the code more than once, the test of a loop that runs until the
data say stop. fuzzdiff.confirm.identities asks it of a mismatch small
enough to be such a tolerance.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FrameType

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fuzzdiff.case.case import Case
from fuzzdiff.confirm.ladder import on_time
from fuzzdiff.guards.graph import graph_nodes
from fuzzdiff.paths.function import leaf_function
from fuzzdiff.targets.target import Target

__all__ = ["Stopping", "stopping_rule"]

# the ops through which a tensor's value reaches Python
_READS = frozenset(
    {
        torch.ops.aten._local_scalar_dense.default,  # item(), bool(), float(), int()
        torch.ops.aten.is_nonzero.default,
        torch.ops.aten.allclose.default,
        torch.ops.aten.equal.default,
    }
)
_TORCH = str(Path(torch.__file__).resolve().parent)
_HERE = str(Path(__file__).resolve())


@dataclass(frozen=True)
class Stopping:
    """``rules`` (the autograd.Functions, by name) read tensor values into
    Python ``reads`` times in their forward, ``again`` of them at ``site``
    (file:line), the most read place: a loop's test."""

    rules: tuple[str, ...]
    reads: int
    site: str
    again: int

    def __str__(self) -> str:
        return (
            f"a derivative rule of the code's own ({', '.join(self.rules)}) replaces the derivative of a loop that "
            f"stops on a test of its values (its forward read tensor values into Python {self.reads} times, "
            f"{self.again} at {self.site})"
        )


class _Reads(TorchDispatchMode):
    """Where the code read tensor values into Python: for each read, the
    first frame outside torch (its site) and the code objects on the stack."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[str, frozenset[CodeType]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        on_time()  # one run of the target, op by op, within the climb's allowance
        if func in _READS:
            site, codes = None, set()
            frame: FrameType | None = sys._getframe(1)
            while frame is not None:
                name = frame.f_code.co_filename
                if site is None and not name.startswith(_TORCH) and name != _HERE:
                    site = f"{Path(name).name}:{frame.f_lineno}"
                codes.add(frame.f_code)
                frame = frame.f_back
            if site is not None:
                self.reads.append((site, frozenset(codes)))
        return func(*args, **(kwargs or {}))


def stopping_rule(target: Target, case: Case) -> Stopping | None:
    """One float64 call of ``target`` at ``case``, watched: the code's own
    derivative rules whose forward runs a loop that stops on its values, or
    None (none does, or the call raises)."""
    watch = _Reads()
    try:
        f = leaf_function(target, case, cast=torch.float64)
        with torch.enable_grad(), watch:
            outs = f(*f.leaves)
    except Exception:  # noqa: BLE001 - nothing seen
        return None
    forwards = _own_rules(outs)
    sites: Counter[str] = Counter()
    rules: dict[str, None] = {}
    for site, codes in watch.reads:
        inside = [name for name, code in forwards.items() if code in codes]
        if inside:
            sites[site] += 1
            rules.update(dict.fromkeys(inside))
    if not sites:
        return None
    site, again = sites.most_common(1)[0]
    if again < 2:  # no place read twice: branches, not a loop's test
        return None
    return Stopping(tuple(rules), sum(sites.values()), site, again)


def _own_rules(outs) -> dict[str, CodeType]:
    """The code's own autograd.Functions in the graph of ``outs``, by name,
    with their forward's code (torch's own Python Functions are not the code's)."""
    found: dict[str, CodeType] = {}
    for node in graph_nodes(outs):
        cls = getattr(node, "_forward_cls", None)
        code = getattr(getattr(cls, "forward", None), "__code__", None)
        if cls is not None and code is not None and not getattr(cls, "__module__", "").startswith("torch."):
            found[cls.__qualname__] = code
    return found
