"""One call, recorded op by op at the ATen level: what each op saw.

A failure found at the API a user called is localized below it
(fuzzdiff.search.localize) by running each op on its own at the inputs it
received. So the call is watched by a ``TorchDispatchMode``: for every op,
its overload, its arguments with each tensor's metadata (shape, strides,
storage offset, dtype, which storage it lives in, whether it requires grad
and whether it derives from the call's arguments) and a copy of each input
storage's values as the op saw them. Cases are shrunk before they are
localized, so the copies are small; past ``MAX_ELEMENTS`` the trace keeps the
ops' metadata without their values (``complete`` is then False).

The op whose call raised is marked (``raised``): the innermost op in flight
when an exception propagated out of the call.
"""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_unflatten
from torch.utils.weak import WeakTensorKeyDictionary

from fuzzdiff.guards.raised import frame_text

__all__ = ["TensorSeen", "Slot", "OpSeen", "AtenTrace", "trace_call", "MAX_ELEMENTS"]

MAX_ELEMENTS = 1 << 20  # input elements whose values a trace keeps, all ops together

# The files between an op's caller and the mode: not where the op was called from.
_DISPATCH_FILES = tuple(
    os.path.join("torch", *name.split("/"))
    for name in ("_ops.py", "utils/_python_dispatch.py", "overrides.py", "_compile.py", "_dynamo/eval_frame.py")
)


@dataclass(frozen=True)
class TensorSeen:
    """A tensor as an op saw it. ``storage``: which storage it lives in,
    numbered in the order the trace met them; ``storage_size``: that
    storage's length in elements. ``derived``: it is one of the call's
    arguments (``argument``: which), or an op made it from one. ``source``:
    the op and output position that made it (None: made outside the trace)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    dtype: torch.dtype
    storage: int
    storage_size: int
    requires_grad: bool
    derived: bool
    source: tuple[int, int] | None = None
    argument: int | None = None

    def describe(self) -> str:
        """``float64[3, 4] stride (4, 1)``, with the offset where there is one."""
        dtype = str(self.dtype).removeprefix("torch.")
        stride = "(" + ", ".join(map(str, self.stride)) + ("," if len(self.stride) == 1 else "") + ")"
        text = f"{dtype}[{', '.join(map(str, self.shape))}] stride {stride}"
        return text + (f" offset {self.offset}" if self.offset else "")

    @property
    def contiguous_whole(self) -> bool:
        """Its storage holds exactly its elements, row-major."""
        expected, acc = [], 1
        for n in reversed(self.shape):
            expected.append(acc)
            acc *= max(n, 1)
        dense = all(n <= 1 or s == e for n, s, e in zip(self.shape, self.stride, reversed(expected)))
        return dense and self.offset == 0 and self.storage_size == acc


@dataclass(frozen=True)
class Slot:
    """Where an op's argument structure held its ``index``-th tensor input."""

    index: int


@dataclass(frozen=True)
class OpSeen:
    """One op of the call: ``op`` (an OpOverload), its arguments with every
    tensor replaced by a Slot into ``inputs``, its outputs, whether grad
    mode was on (off inside an autograd.Function's forward and under
    no_grad), the Python frame it was called from (fuzzdiff.guards.raised's
    wording), the values of its input storages as it saw them (None: past
    the trace's MAX_ELEMENTS) and whether its call raised."""

    index: int
    op: Any
    args: tuple
    kwargs: dict
    inputs: tuple[TensorSeen, ...]
    outputs: tuple[TensorSeen, ...]
    grad_enabled: bool
    where: str
    values: dict[int, torch.Tensor] | None = None
    raised: bool = False
    output_kind: str = "tensor"  # "tensor", "sequence" (a tuple or list of tensors) or "other"

    @property
    def name(self) -> str:
        """The op's name without its overload: ``aten::div_``."""
        return self.op._schema.name

    @property
    def overload(self) -> str:
        return self.op._overloadname

    @property
    def call(self) -> str:
        """How Python calls it: ``torch.ops.aten.div_.Tensor``."""
        namespace, name = self.name.split("::", 1)
        return f"torch.ops.{namespace}.{name}.{self.overload}"

    @property
    def written(self) -> tuple[int, ...]:
        """The inputs the op writes into (an in-place op's self, an out= argument)."""
        schema = self.op._schema
        names = [a.name for a in schema.arguments]
        writes = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
        if not writes:
            return ()
        found: list[int] = []
        for position, value in enumerate(self.args):
            if position < len(names) and names[position] in writes:
                found += [s.index for s in tree_flatten(value)[0] if isinstance(s, Slot)]
        for key, value in self.kwargs.items():
            if key in writes:
                found += [s.index for s in tree_flatten(value)[0] if isinstance(s, Slot)]
        return tuple(dict.fromkeys(found))

    @property
    def random(self) -> bool:
        """The op draws from a generator (its values depend on the seed)."""
        return torch.Tag.nondeterministic_seeded in getattr(self.op, "tags", ())


@dataclass
class AtenTrace:
    """The ops of one call, in order (``ops``), and the op whose call raised
    (``in_flight``); which op made each tensor, and which derive from the
    call's arguments, asked of the tensors themselves while they live."""

    ops: list[OpSeen] = field(default_factory=list)
    complete: bool = True  # every op's input values were kept
    made: WeakTensorKeyDictionary = field(default_factory=WeakTensorKeyDictionary)  # tensor -> (op, position)
    derived: WeakTensorKeyDictionary = field(default_factory=WeakTensorKeyDictionary)

    @property
    def in_flight(self) -> OpSeen | None:
        return next((op for op in reversed(self.ops) if op.raised), None)

    def derives(self, t: torch.Tensor) -> bool:
        """``t`` is one of the call's arguments, or an op of the call made it from one."""
        return bool(self.derived.get(t, False))

    def reaching(self, outputs: Sequence[torch.Tensor]) -> set[int]:
        """The ops whose results reach ``outputs``: those that made them, the
        ops those read from, and the earlier ops that wrote into what they read."""
        writes = [(op.index, {op.inputs[k].storage for k in op.written}) for op in self.ops if op.written]
        todo = [self.made[t][0] for t in outputs if t in self.made]
        reached: set[int] = set()
        while todo:
            i = todo.pop()
            if i in reached:
                continue
            reached.add(i)
            read = {t.storage for t in self.ops[i].inputs}
            todo += [t.source[0] for t in self.ops[i].inputs if t.source is not None]
            todo += [j for j, written in writes if j < i and j not in reached and written & read]
        return reached


class _Recording(TorchDispatchMode):
    def __init__(self, trace: AtenTrace, arguments: Sequence[Any]):
        super().__init__()
        self.trace = trace
        self.made, self.derived = trace.made, trace.derived
        self.arguments: WeakTensorKeyDictionary = WeakTensorKeyDictionary()
        self.storages: dict[int, tuple[Any, int]] = {}  # id of an untyped storage -> (it, its number)
        self.kept = 0
        self.refs: list[tuple[int, int, Any]] = []  # (op, position, a weak reference to the output)
        for i, t in enumerate(arguments):
            if isinstance(t, torch.Tensor):
                self.arguments[t] = i
                self.derived[t] = True

    def _storage(self, t: torch.Tensor) -> int:
        s = t.untyped_storage()
        key = id(s)
        if key not in self.storages:  # the storage is held, so that its id is never reused within the trace
            self.storages[key] = (s, len(self.storages))
        return self.storages[key][1]

    def _seen(self, t: torch.Tensor, source: tuple[int, int] | None = None) -> TensorSeen:
        size = t.untyped_storage().nbytes() // max(t.element_size(), 1)
        return TensorSeen(
            tuple(t.shape),
            tuple(t.stride()),
            int(t.storage_offset()),
            t.dtype,
            self._storage(t),
            size,
            t.requires_grad,
            bool(self.derived.get(t, False)),
            source if source is not None else self.made.get(t),
            self.arguments.get(t),
        )

    def _values(self, tensors: Sequence[torch.Tensor], seen: Sequence[TensorSeen]) -> dict[int, torch.Tensor] | None:
        if not self.trace.complete:
            return None
        out: dict[int, torch.Tensor] = {}
        for t, s in zip(tensors, seen):
            if s.storage in out or t.device.type == "meta" or t.is_sparse or t.layout != torch.strided:
                continue
            self.kept += s.storage_size
            if self.kept > MAX_ELEMENTS:
                self.trace.complete = False
                return None
            with torch.no_grad():
                out[s.storage] = t.detach().as_strided((s.storage_size,), (1,), 0).clone()
        return out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flat, spec = tree_flatten((args, kwargs))
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]
        slots, k = [], 0
        for a in flat:
            if isinstance(a, torch.Tensor):
                slots.append(Slot(k))
                k += 1
            else:
                slots.append(a)
        held_args, held_kwargs = tree_unflatten(slots, spec)
        inputs = tuple(self._seen(t) for t in tensors)
        index = len(self.trace.ops)
        values = self._values(tensors, inputs)
        grad = torch.is_grad_enabled()
        where = _caller()
        try:
            out = func(*args, **kwargs)
        except BaseException:
            self.trace.ops.append(
                OpSeen(index, func, tuple(held_args), dict(held_kwargs), inputs, (), grad, where, values, True)
            )
            raise
        produced, kind = _outputs(out)
        derived = any(self.derived.get(t, False) for t in tensors)
        for j, o in enumerate(produced):
            self.made[o] = (index, j)
            if derived:
                self.derived[o] = True
        outputs = tuple(self._seen(o, (index, j)) for j, o in enumerate(produced))
        self.refs += [(index, j, weakref.ref(o)) for j, o in enumerate(produced)]
        self.trace.ops.append(
            OpSeen(index, func, tuple(held_args), dict(held_kwargs), inputs, outputs, grad, where, values, False, kind)
        )
        return out


def _outputs(out: Any) -> tuple[list[torch.Tensor], str]:
    if isinstance(out, torch.Tensor):
        return [out], "tensor"
    if isinstance(out, (tuple, list)) and all(isinstance(o, torch.Tensor) for o in out):
        return list(out), "sequence"
    return [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)], "other"


def _caller() -> str:
    """The innermost Python frame outside the dispatch machinery: where the op was called."""
    frame: Any = sys._getframe(2)
    while frame is not None and (
        frame.f_code.co_filename.endswith(_DISPATCH_FILES) or frame.f_code.co_filename == __file__
    ):
        frame = frame.f_back
    if frame is None:
        return "(no Python frame)"
    return frame_text(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


def trace_call(
    fn: Callable[..., Any], args: Sequence[Any], kwargs: dict | None = None, into: AtenTrace | None = None
) -> tuple[AtenTrace, Any]:
    """Call ``fn(*args, **kwargs)`` under the recording mode: the trace
    (``into``, where given), and what the call returned (an exception it
    raised propagates, the trace then held in its ``aten_trace`` attribute)."""
    trace = AtenTrace() if into is None else into
    recording = _Recording(trace, args)
    try:
        with recording:
            out = fn(*args, **(kwargs or {}))
    except Exception as e:
        _graded(trace, recording.refs)
        e.aten_trace = trace  # type: ignore[attr-defined]
        raise
    _graded(trace, recording.refs)
    return trace, out


def _graded(trace: AtenTrace, refs: Sequence[tuple[int, int, Any]]) -> None:
    """Each output's ``requires_grad`` as autograd left it: the mode sees an
    output before autograd attaches it to the graph. Asked of the tensor where
    it lives, else of the ops that read it."""
    grads: dict[tuple[int, int], bool] = {}
    for op in trace.ops:
        for t in op.inputs:
            if t.source is not None:
                grads[t.source] = grads.get(t.source, False) or t.requires_grad
    for i, j, ref in refs:
        alive = ref()
        if alive is not None:
            grads[(i, j)] = grads.get((i, j), False) or alive.requires_grad
    for i, op in enumerate(trace.ops):
        if op.outputs:
            outputs = tuple(replace(t, requires_grad=grads.get((i, j), False)) for j, t in enumerate(op.outputs))
            trace.ops[i] = replace(op, outputs=outputs)
