"""What a target's code brings to a check, seen in one call of it.

Two paths of torch that run the very same code (compiled and eager, batched
and looped, two memory layouts of the same values) must agree, unless the
code itself tells them apart: with a derivative or batching rule of its own
(an ``autograd.Function``, a custom op's backward), or by asking how it is
run (``x.is_contiguous()``, a cache keyed by ``data_ptr()``,
``torch.compiler.is_compiling()``, a draw of Python's ``random`` that
checkpointing does not restore). Whose bug a disagreement is
(fuzzdiff.search.blame) turns on both, found here by watching one float64 call: its
graph for the rules, a TorchFunctionMode and a profile hook for the questions.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from fuzzdiff.case.case import Case
from fuzzdiff.guards.graph import graph_nodes
from fuzzdiff.targets.target import Target

__all__ = ["Inspection", "inspect_call", "LAYOUT", "COMPILING", "BATCHING", "RANDOM"]

# What the code may ask about its run, by the kind of run it tells apart.
LAYOUT = "its memory layout or storage"
COMPILING = "whether it is compiled or traced"
BATCHING = "whether it is batched"
RANDOM = "Python's or numpy's random numbers"

# Tensor methods whose answer is the memory, not the values.
_LAYOUT_METHODS = {
    getattr(torch.Tensor, name): name
    for name in ("is_contiguous", "stride", "storage_offset", "data_ptr", "untyped_storage", "is_set_to")
    if hasattr(torch.Tensor, name)
}


def _question_functions() -> dict[Any, tuple[str, str]]:
    """Functions whose call asks about the run: the callable -> (its name, what it asks)."""
    found: dict[Any, tuple[str, str]] = {}
    for owner, names, kind in (
        # torch.jit.is_scripting() and is_tracing() are False under torch.compile and
        # torch.export as in eager: they tell TorchScript runs apart, which no check makes
        (torch.compiler, ("is_compiling", "is_dynamo_compiling", "is_exporting"), COMPILING),
        (torch._C._functorch, ("is_batchedtensor", "is_functorch_wrapped_tensor", "maybe_current_level"), BATCHING),
    ):
        for name in names:
            fn = getattr(owner, name, None)
            if fn is not None:
                found[getattr(fn, "__code__", fn)] = (f"{owner.__name__}.{name}()", kind)
    return found


@dataclass(frozen=True)
class Inspection:
    """``rules``: the code's own rules (autograd.Functions and custom ops, with
    their own backward, fake kernel or batching rule), by name; ``asks``: what
    it asks about its run, as (what it called, which kind of run that tells
    apart), its own questions only, not torch's inside the ops it calls."""

    rules: tuple[str, ...] = ()
    asks: tuple[tuple[str, str], ...] = ()
    calls: tuple[str, ...] = ()  # the torch functions and methods it calls itself, by name

    def asked(self, kind: str) -> list[str]:
        return [name for name, k in self.asks if k == kind]


# torch's own operator namespaces; an op of any other is a custom op, a rule of the code's own
TORCH_NAMESPACES = frozenset(
    {"aten", "prim", "prims", "quantized", "_quantized", "c10d", "_c10d_functional", "inductor", "higher_order"}
)
_TORCH_FILES = str(Path(torch.__file__).resolve().parent)


def _outside_torch(filename: str) -> bool:
    """A frame of the code under test (the question is its own), not torch's."""
    return not str(Path(filename).resolve()).startswith(_TORCH_FILES)


class _Watching(TorchFunctionMode):
    def __init__(self, asks: dict[tuple[str, str], None], ops: dict[str, None], calls: dict[str, None]):
        super().__init__()
        self.asks, self.ops, self.calls = asks, ops, calls

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", None)
        if isinstance(name, str):
            self.calls[name] = None
        method = _LAYOUT_METHODS.get(func)
        if method is not None and _outside_torch(sys._getframe(1).f_code.co_filename):
            self.asks[(f"Tensor.{method}", LAYOUT)] = None
        namespace = getattr(func, "namespace", None)
        if isinstance(func, torch._ops.OpOverload) and namespace not in TORCH_NAMESPACES:
            self.ops[f"the custom op {func.name()}"] = None
        return func(*args, **(kwargs or {}))


def inspect_call(target: Target, case: Case) -> Inspection:
    """Call ``target`` once at ``case``'s values in float64, and see what it brings."""
    try:
        inputs = case.materialize(cast=torch.float64)
    except Exception:  # noqa: BLE001 - nothing to call it at
        return Inspection()
    asks: dict[tuple[str, str], None] = {}
    ops: dict[str, None] = {}
    calls: dict[str, None] = {}
    questions = _question_functions()

    def hook(frame, event, arg):
        if event == "call":  # a Python function: its caller asks
            caller = frame.f_back
            found = questions.get(frame.f_code) if caller is not None else None
        elif event == "c_call":  # a builtin: this frame asks
            caller = frame
            found = questions.get(arg) or _random_draw(arg)
        else:
            return
        if found is not None and _outside_torch(caller.f_code.co_filename):
            asks[found] = None

    previous = sys.getprofile()
    try:
        with _Watching(asks, ops, calls):
            sys.setprofile(hook)
            try:
                out = target(*inputs.args, **case.kwargs)
            finally:
                sys.setprofile(previous)
    except Exception:  # noqa: BLE001 - what it asked before it raised still counts; no graph to read
        return Inspection(tuple(ops), tuple(asks), tuple(calls))
    return Inspection(tuple(dict.fromkeys([*_rules(out), *ops])), tuple(asks), tuple(calls))


def _random_draw(fn: Any) -> tuple[str, str] | None:
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, random.Random):
        return (f"random.{getattr(fn, '__name__', '?')}()", RANDOM)
    if isinstance(owner, np.random.RandomState | np.random.Generator):
        return (f"numpy.random.{getattr(fn, '__name__', '?')}()", RANDOM)
    return None


def _rules(out: Any) -> tuple[str, ...]:
    """The Python-defined nodes of the graph behind ``out`` (torch's own nodes
    are C++ classes; an autograd.Function's is a ``BackwardCFunction``)."""
    found: dict[str, None] = {}
    for node in graph_nodes(out):
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            cls = getattr(node, "_forward_cls", None)
            name = getattr(cls, "__qualname__", type(node).__name__)
            # torch's own Python Functions (reentrant checkpoint) are not the target's; custom ops are
            if not getattr(cls, "__module__", "").startswith("torch.") or name.startswith("GeneratedBackwardFor"):
                found[name] = None
    return tuple(found)
