"""Recorded ops as torch-only code: one op alone, or the ops that lead to one.

fuzzdiff.search.localize runs the failing check on pieces of a traced call
(fuzzdiff.guards.aten_trace): each op on its own, at the inputs it saw, or
the few ops that make one op's inputs from the call's arguments. Each piece
is written as text first (``Program.source``, a user target's stored source:
imports, setup, definitions, call) and executed to make its function, as the
plain-torch stand-in is (fuzzdiff.targets.standin): so the very code that was
judged is what a record replays and a script prints.

Every op is called by its overload, ``torch.ops.aten.div_.Tensor(...)``: the
op the trace saw, whatever Python spelled it. A tensor the piece does not
take as an argument nor make itself is a constant, written out with its
values, strides and offset.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from fuzzdiff.errors import FuzzdiffError
from fuzzdiff.guards.aten_trace import AtenTrace, OpSeen, Slot, TensorSeen

__all__ = ["Param", "Program", "Unwritable", "one_op", "leading_to", "literal", "tensor_literal", "MAX_LITERAL"]

MAX_LITERAL = 4096  # elements of a constant written out in a piece's code


class Unwritable(FuzzdiffError, ValueError):
    """An argument that has no literal in Python (a generator, a symbolic size, a large constant)."""


@dataclass(frozen=True)
class Param:
    """One argument of a piece: the tensor the op saw, its storage's values,
    and whether the piece takes it ``whole`` (the flat storage, for an input
    the op writes into: the piece writes into a copy of it)."""

    seen: TensorSeen
    storage: torch.Tensor
    whole: bool = False

    @property
    def differentiable(self) -> bool:
        """The op's derivative with respect to it is part of the failing call's:
        it derives from the call's arguments and requires grad, in float64."""
        return self.seen.derived and self.seen.requires_grad and self.seen.dtype == torch.float64


@dataclass(frozen=True)
class Program:
    """A piece's code (``source``), its function (``fn``), the arguments it
    takes (``params``, None: the traced call's own) and the ops it runs."""

    name: str
    source: dict
    fn: Callable[..., Any]
    params: tuple[Param, ...] | None
    ops: tuple[OpSeen, ...]
    random: bool = False

    @property
    def text(self) -> str:
        """The source as plain lines: setup, then the function."""
        return "\n".join([*self.source["setup"], *self.source["definitions"]]).rstrip() + "\n"


def _float(x: float) -> str:
    if math.isfinite(x):
        return repr(x)
    return f"float({str(x)!r})"


def literal(value: Any) -> str:
    """``value`` (an op's non-tensor argument) as Python source."""
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, complex):
        return f"complex({_float(value.real)}, {_float(value.imag)})"
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, (torch.layout, torch.memory_format)):
        return str(value)
    if isinstance(value, (list, tuple)):
        inner = ", ".join(literal(v) for v in value)
        if isinstance(value, tuple):
            return f"({inner}{',' if len(value) == 1 else ''})"
        return f"[{inner}]"
    raise Unwritable(f"no literal for a {type(value).__name__}")


def _shape(values: Sequence[int]) -> str:
    return "(" + ", ".join(map(str, values)) + ("," if len(values) == 1 else "") + ")"


def tensor_literal(storage: torch.Tensor, seen: TensorSeen | None = None) -> str:
    """A flat storage's values as ``torch.tensor([...], dtype=...)``, viewed
    as ``seen`` (its shape, strides and offset) where given."""
    if storage.numel() > MAX_LITERAL:
        raise Unwritable(f"a constant of {storage.numel()} elements")
    dtype = storage.dtype
    if dtype.is_complex:
        items = [literal(complex(v)) for v in storage.tolist()]
    elif dtype.is_floating_point:
        items = [_float(float(v)) for v in storage.to(torch.float64).tolist()]
    else:
        items = [repr(v) for v in storage.tolist()]
    text = f"torch.tensor([{', '.join(items)}], dtype={dtype})"
    if seen is not None:
        text += f".as_strided({_shape(seen.shape)}, {_shape(seen.stride)}, {seen.offset})"
    return text


def _source(name: str, params: Sequence[str], body: Sequence[str], setup: Sequence[str]) -> dict:
    definition = f"def {name}({', '.join([*params, '**kwargs'])}):\n" + "".join(f"    {line}\n" for line in body)
    return {"imports": ["import torch"], "setup": list(setup), "definitions": [definition], "call": name}


def _compiled(source: dict) -> Callable[..., Any]:
    namespace: dict = {}
    try:
        exec("\n".join([*source["imports"], *source["setup"], *source["definitions"]]), namespace)  # noqa: S102 - ours
    except SyntaxError as e:  # an argument whose repr is no literal after all
        raise Unwritable(f"the piece's code does not compile: {e}") from None
    fn = namespace[source["call"]]
    fn.fuzzdiff_source = source  # the script generator writes this source, as for a stored user function
    return fn


def _call(op: OpSeen, names: Sequence[str]) -> str:
    """``torch.ops.aten.x.y(args)`` with the op's k-th tensor input spelled ``names[k]``."""

    class _Name:
        def __init__(self, text: str):
            self.text = text

    flat, spec = tree_flatten((op.args, op.kwargs))
    named = [_Name(names[a.index]) if isinstance(a, Slot) else a for a in flat]
    args, kwargs = tree_unflatten(named, spec)

    def written(v: Any) -> str:
        if isinstance(v, _Name):
            return v.text
        if isinstance(v, (list, tuple)) and any(isinstance(x, _Name) for x in v):
            inner = ", ".join(written(x) for x in v)
            return f"[{inner}]" if isinstance(v, list) else f"({inner}{',' if len(v) == 1 else ''})"
        return literal(v)

    parts = [written(a) for a in args] + [f"{k}={written(v)}" for k, v in kwargs.items()]
    return f"{op.call}({', '.join(parts)})"


def one_op(op: OpSeen, name: str | None = None) -> Program:
    """``op`` alone: a function of every tensor it read, calling it by its
    overload. An input it writes into is taken as its flat storage and
    copied first, then viewed as the op saw it (an in-place op must not write
    into the case's own tensors, and a copy of the view alone would lose the
    memory around it). Unwritable where an argument has no literal."""
    if op.values is None:
        raise Unwritable("the trace kept no values for this op (past its size limit)")
    if any(t.storage not in op.values for t in op.inputs):
        raise Unwritable("an input that is not a strided tensor on the CPU")
    written = set(op.written)
    params = tuple(Param(t, op.values[t.storage], whole=k in written) for k, t in enumerate(op.inputs))
    names, body = [], []
    for k, p in enumerate(params):
        if p.whole:
            body.append(f"s{k} = x{k}.clone()  # the op writes into it: into a copy of its storage")
            body.append(f"v{k} = s{k}.as_strided({_shape(p.seen.shape)}, {_shape(p.seen.stride)}, {p.seen.offset})")
            names.append(f"v{k}")
        else:
            names.append(f"x{k}")
    body.append(f"return {_call(op, names)}")
    label = name or "aten_" + op.name.split("::", 1)[-1].strip("_") + "_alone"
    source = _source(label, [f"x{k}" for k in range(len(params))], body, [])
    return Program(label, source, _compiled(source), params, (op,), op.random)


def leading_to(trace: AtenTrace, index: int, arguments: int, name: str = "aten_program") -> Program:
    """The ops of ``trace`` that op ``index`` needs, and it: those that made
    its inputs from the call's arguments, and those that wrote into their
    storages before it, in the trace's order; a function of the call's
    ``arguments`` tensor arguments, returning op ``index``'s outputs. A
    tensor none of them made and no argument is a constant. Unwritable where
    a needed op ran with grad mode off on a value the arguments derive
    (inside an autograd.Function's forward): the program would differentiate
    what the call did not."""
    ops = trace.ops
    chosen: set[int] = set()

    def need(i: int) -> None:
        if i in chosen:
            return
        chosen.add(i)
        for t in ops[i].inputs:
            if t.source is not None and t.source[0] < i:
                need(t.source[0])

    need(index)
    grew = True
    while grew:  # earlier writes into a storage the chosen ops read
        storages = {t.storage for i in chosen for t in (*ops[i].inputs, *ops[i].outputs)}
        grew = False
        for j in range(index):
            op = ops[j]
            if j not in chosen and any(op.inputs[k].storage in storages for k in op.written):
                need(j)
                grew = True
    setup: list[str] = []
    body: list[str] = []
    constants: dict[tuple, str] = {}
    for i in sorted(chosen):
        op = ops[i]
        if not op.grad_enabled and any(t.derived for t in op.inputs):
            # inside an autograd.Function's forward (its backward replaces the op's) or under
            # no_grad (a constant): replayed in grad mode, autograd would differentiate it
            raise Unwritable(f"{op.name} ran with grad mode off, on a value the arguments derive")
        names = []
        for t in op.inputs:
            if t.source is not None and t.source[0] in chosen:
                j, position = t.source
                if ops[j].output_kind == "other":
                    raise Unwritable("an op of the program returns something other than tensors")
                names.append(f"t{j}" if ops[j].output_kind == "tensor" else f"t{j}[{position}]")
            elif t.argument is not None:
                names.append(f"x{t.argument}")
            else:
                if op.values is None:
                    raise Unwritable("the trace kept no values for an op of the program")
                if t.storage not in op.values:
                    raise Unwritable("a constant that is not a strided tensor on the CPU")
                key = (i, t.storage, t.shape, t.stride, t.offset)
                if key not in constants:
                    constants[key] = f"C{len(constants)}"
                    setup.append(f"{constants[key]} = {tensor_literal(op.values[t.storage], t)}")
                names.append(constants[key])
        body.append(f"t{i} = {_call(op, names)}")
    last = ops[index]
    if last.output_kind == "other":
        raise Unwritable("the op returns something other than tensors")
    body.append(f"return t{index}")
    source = _source(name, [f"x{k}" for k in range(arguments)], body, setup)
    chosen_ops = tuple(ops[i] for i in sorted(chosen))
    return Program(name, source, _compiled(source), None, chosen_ops, any(op.random for op in chosen_ops))
