"""Whose failure, down to the piece: the torch op, the code's own rule, or the composition.

A failure is found where the user called: a whole function. Its cause is
smaller. The function is called once more at the failing case (in float64),
recorded op by op (fuzzdiff.guards.aten_trace), and the failing check is run
on pieces of it, each with the check's own confirmation (a mismatch must
survive a replay, other steps and neighbouring points: a false accusation
of an op is a false alarm):

- a numerical mismatch of a derivative check (grad, forward, gradgrad,
  forward2): each op that carries the call's derivative (it reads a tensor
  derived from the arguments, in grad mode, and its output reaches the
  call's) is run alone at the inputs it saw, with their strides and offsets
  (fuzzdiff.search.aten_program.one_op). **An op that fails alone is
  PyTorch's.** If none does, each ``autograd.Function`` the call applied is
  run alone at the inputs it received: its backward and jvp against finite
  differences of its own forward. **A rule that fails alone is its author's**
  (the ops inside its forward are not judged: its backward replaces them).
  If every op and rule passes alone, **the composition** fails: how the code
  connects them (a detach, a no_grad block, an in-place write, a value taken
  out of the graph).
- an exception: the ops called from the frame it was raised in are run
  alone under the check (its mode: forward AD, nested jvp, vmap...) and in
  plain eager; one that raises the same error under the check, and not in
  plain eager, is PyTorch's. Where an op raises only with the history of its
  inputs (a tangent made by the op before it), the few aten ops that lead to
  it from the arguments are run instead: no code of the user's is in them.

Each finding comes with a short torch-only script (fuzzdiff.search.op_script).
Localizing is bounded in time (the failure's settling, fuzzdiff.search.settling):
what the time does not reach is said, "not localized: no time".
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from hypothesis.errors import UnsatisfiedAssumption
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_leaves, tree_unflatten

from fuzzdiff.case.case import DTYPES, Arg, Case
from fuzzdiff.case.layout import Alias, CaseError, Layout
from fuzzdiff.case.values import Values
from fuzzdiff.checks import Check
from fuzzdiff.guards.aten_trace import AtenTrace, OpSeen, Slot, TensorSeen, trace_call
from fuzzdiff.guards.raised import frame_text
from fuzzdiff.guards.timeout import OutOfTime, bounded
from fuzzdiff.search.aten_program import Param, Program, Unwritable, leading_to, one_op
from fuzzdiff.search.op_points import explains, unjudged_at
from fuzzdiff.search.op_script import op_script
from fuzzdiff.search.runner import run_check
from fuzzdiff.targets.randomness import seeded_alike
from fuzzdiff.targets.target import NoGrad, Target
from fuzzdiff.verdict import Verdict, headline, mismatch

__all__ = ["Localized", "localize", "LEVELS", "NUMERIC", "SECONDS", "RANDOM_SEED", "TIMES"]

LEVELS = ("op", "rule", "composition")
# the checks whose numerical mismatches are localized by op, rule and composition
NUMERIC = ("grad", "forward", "gradgrad", "forward2")
SECONDS = 30.0  # localizing's own bound where the caller gives none (a campaign's failures)
RANDOM_SEED = 0  # a random piece's generators are seeded with it before every call (its script too)
NO_TIME = "not localized: no time"
TIMES: deque[float] = deque(maxlen=4096)  # the seconds each localizing took in this process (bench/check.py)


@dataclass(frozen=True)
class Localized:
    """Where a failure is: ``level`` one of LEVELS (None: not localized,
    ``evidence`` says why); ``op``: the op (``aten::div_``) or the rule's
    class; ``torchs``: that piece is torch's own (an aten op, a Function
    defined in torch); ``at``: its inputs' metadata; ``script``: a short
    torch-only script that fails as it did; ``judged``: how many pieces
    were run alone; ``seconds``: how long it took."""

    level: str | None
    evidence: str
    op: str | None = None
    torchs: bool | None = None
    at: str | None = None
    script: str | None = None
    judged: int = 0
    seconds: float = 0.0


def localize(check: Check, target: Target, case: Case, verdict: Verdict, deadline: float | None = None) -> Localized:
    """Where the failure ``verdict`` of ``check`` on ``target`` at ``case``
    is (see the module's docstring), by ``deadline`` (a time.monotonic()
    instant; default: SECONDS from now)."""
    start = time.monotonic()
    end = start + SECONDS if deadline is None else deadline
    if start >= end:
        return Localized(None, NO_TIME)
    found = Localized(None, NO_TIME)
    try:
        with bounded(end):
            found = _localize(check, target, case, verdict, _Clock(end))
    except OutOfTime:
        pass
    TIMES.append(time.monotonic() - start)
    return replace(found, seconds=TIMES[-1])


@dataclass
class _Clock:
    end: float
    judged: int = 0

    def left(self) -> bool:
        return time.monotonic() < self.end


def _localize(check: Check, target: Target, case: Case, verdict: Verdict, clock: _Clock) -> Localized:
    if target.module is not None:
        return Localized(None, "not localized: a module target's call builds its module")
    if case.dtype != "float64":
        case = case.with_dtype(torch.float64)
        again = _run(check, target, case)
        if mismatch(verdict, again) is not None:
            return Localized(None, f"not localized: in float64 the same case does not fail so ({again.kind})")
    trace, applied, outputs = _traced(target, case)
    if verdict.errors.get("exception"):
        return _by_the_raising_op(check, target, case, verdict, trace, applied, clock)
    if check.name in NUMERIC and verdict.kind == "fail":
        return _op_rule_or_composition(check, case, trace, applied, outputs, clock, verdict)
    return Localized(None, f"not localized: the {check.name} check's mismatches are not localized by op")


# -- the traced call ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Applied:
    """One ``Function.apply`` of the call: the class, its arguments with each
    tensor a Slot into ``params``, and those tensors as the rule received them."""

    cls: type
    args: tuple
    kwargs: dict
    params: tuple[Param, ...]
    random: bool = False


def _traced(target: Target, case: Case) -> tuple[AtenTrace, list[_Applied], list[torch.Tensor]]:
    """The target's float64 call at the case, traced; the Functions it
    applied; its tensor outputs (none where it raised)."""
    inputs = case.materialize(requires_grad=True)
    trace, applied = AtenTrace(), list[_Applied]()
    arguments = {id(t): i for i, t in enumerate(inputs.args) if isinstance(t, torch.Tensor)}
    with _applies_watched(trace, applied, arguments), torch.random.fork_rng(devices=[]):  # the caller's draws kept
        if target.random:
            torch.manual_seed(RANDOM_SEED)
        try:
            _, out = trace_call(target.fn, inputs.args, dict(case.kwargs), into=trace)
        except Exception:  # noqa: BLE001 - the ops before the raise are the trace
            out = None
    return trace, applied, [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]


@contextlib.contextmanager
def _applies_watched(trace: AtenTrace, applied: list[_Applied], arguments: dict[int, int]) -> Iterator[None]:
    """Every ``autograd.Function.apply`` in the block recorded with what it
    received, and whether its forward drew random numbers. A profile hook sees
    the call of the C ``apply`` (a ``c_call`` event: torch's Python ``apply``
    ends in it where there is one), so that an ``apply`` bound before the block
    (``my_fn = MyFunction.apply``, a target that is one) is seen too; what it
    received is read from the frame of the class's ``forward``, the first
    Python code the C ``apply`` runs of the class's own."""
    open_calls: list[_OpenApply] = []
    previous = sys.getprofile()

    def hook(frame, event, arg):
        if event == "call":
            top = open_calls[-1] if open_calls else None
            if top is not None and top.received is None and frame.f_code is top.forward:
                with _disable_current_modes():  # copying the inputs is not the call's
                    args, kwargs = _forward_arguments(frame, top.cls)
                    top.received = _received(top.cls, args, kwargs, trace, arguments)
            return
        if event not in ("c_call", "c_return", "c_exception"):
            return
        cls = _applied_class(arg)
        if cls is None:
            return
        if event == "c_call":
            open_calls.append(_OpenApply(cls, _forward_code(cls), len(trace.ops)))
            return
        if open_calls and open_calls[-1].cls is cls:
            done = open_calls.pop()
            if event == "c_return" and done.received is not None:
                # a rule whose forward draws random numbers is judged with its generators seeded alike
                random = any(op.random for op in trace.ops[done.start :])
                applied.append(replace(done.received, random=random))

    sys.setprofile(hook)
    try:
        yield
    finally:
        sys.setprofile(previous)


@dataclass
class _OpenApply:
    """A ``Function.apply`` under way: its class, the code of its forward,
    where its ops begin in the trace, and what it received once seen."""

    cls: type
    forward: Any
    start: int
    received: _Applied | None = None


def _applied_class(called: Any) -> type | None:
    """The ``autograd.Function`` subclass whose C ``apply`` ``called`` is, if it is one."""
    owner = getattr(called, "__self__", None)
    if getattr(called, "__name__", None) != "apply" or not isinstance(owner, type):
        return None
    return owner if issubclass(owner, torch.autograd.Function) else None


def _forward_code(cls: type) -> Any:
    """The code object the C ``apply`` runs first: ``cls.forward``'s (a
    decorator's wrapper, where one wraps it, receives the same arguments)."""
    return getattr(getattr(cls, "forward", None), "__code__", None)


def _forward_arguments(frame: Any, cls: type) -> tuple[tuple, dict]:
    """What ``apply`` was given, read from its forward's frame at entry:
    positionals (less ``ctx`` where the class has no ``setup_context``),
    then keywords."""
    code, local = frame.f_code, frame.f_locals
    names = code.co_varnames
    positional = names[: code.co_argcount]
    keyword_only = names[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]
    rest = code.co_argcount + code.co_kwonlyargcount
    args = [local[n] for n in positional]
    kwargs = {n: local[n] for n in keyword_only}
    if code.co_flags & inspect.CO_VARARGS:
        args.extend(local[names[rest]])
        rest += 1
    if code.co_flags & inspect.CO_VARKEYWORDS:
        kwargs.update(local[names[rest]])
    setup_context = getattr(cls, "setup_context", None)
    if setup_context is _NO_SETUP_CONTEXT and args:  # forward(ctx, *args)
        args = args[1:]
    return tuple(args), kwargs


_NO_SETUP_CONTEXT = torch.autograd.function._SingleLevelFunction.setup_context


def _received(cls: type, args: tuple, kwargs: dict, trace: AtenTrace, arguments: dict[int, int]) -> _Applied:
    flat, spec = tree_flatten((args, dict(kwargs)))
    params: list[Param] = []
    storages: dict[int, int] = {}
    slots: list[Any] = []
    for a in flat:
        if not isinstance(a, torch.Tensor):
            slots.append(a)
            continue
        size = a.untyped_storage().nbytes() // max(a.element_size(), 1)
        number = storages.setdefault(id(a.untyped_storage()), len(storages))
        seen = TensorSeen(
            tuple(a.shape),
            tuple(a.stride()),
            int(a.storage_offset()),
            a.dtype,
            number,
            size,
            a.requires_grad,
            trace.derives(a),
            argument=arguments.get(id(a)),
        )
        with torch.no_grad():
            values = a.detach().as_strided((size,), (1,), 0).clone()
        slots.append(Slot(len(params)))
        params.append(Param(seen, values))
    held_args, held_kwargs = tree_unflatten(slots, spec)
    return _Applied(cls, tuple(held_args), dict(held_kwargs), tuple(params))


# -- one piece as a target at a case ----------------------------------------------------------


def _values(storage: torch.Tensor) -> Values:
    if storage.dtype == torch.bool:
        return Values(kind="bool", low=0, high=1)
    if storage.is_complex():
        return Values()
    finite = storage[torch.isfinite(storage)] if storage.is_floating_point() else storage
    low, high = (float(finite.min()), float(finite.max())) if finite.numel() else (-2.0, 2.0)
    if storage.is_floating_point():
        return Values(low=min(low, -2.0), high=max(high, 2.0))
    return Values(kind="int", low=low, high=max(high, low))


def _dtype(dtype: torch.dtype) -> str | None:
    if dtype == torch.float64:
        return None
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise Unwritable(f"an input of dtype {name}")
    return name


def _case(params: Sequence[Param], like: Case, name: str) -> Case:
    """The case that gives ``params`` to a piece: each tensor in its own
    layout over its recorded storage, those the call differentiates as
    leaves, tensors sharing a storage as aliases; ``like``'s probes."""
    args: list[Arg] = []
    data: dict[int, torch.Tensor] = {}
    owners: dict[tuple[int, bool], int] = {}
    for i, p in enumerate(params):
        t = p.seen
        grad = "leaf" if p.differentiable else "none"
        dtype = _dtype(t.dtype)
        values = _values(p.storage)
        if t.argument is not None and not p.whole and like.args[t.argument].shape == t.shape:
            # the call's own argument: its values keep their structure (a zero of cumprod stays a zero
            # at the neighbouring points the ladder asks)
            values = like.args[t.argument].values
        if p.whole:
            args.append(Arg((t.storage_size,), values, None, None, grad, dtype))
            data[i] = p.storage
            continue
        layout = Layout(t.storage_size, t.stride, t.offset)
        key = (t.storage, p.differentiable)
        if key in owners:
            j = owners[key]
            o = params[j].seen
            same = (o.shape, o.stride, o.offset) == (t.shape, t.stride, t.offset)
            args.append(Arg(t.shape, values, layout, Alias(j, "same" if same else "view"), grad, dtype))
            continue
        owners[key] = i
        args.append(Arg(t.shape, values, layout, None, grad, dtype))
        data[i] = p.storage
    return Case(name, tuple(args), "float64", "cpu", {}, dict(like.params), data)


def _spec(params: Sequence[Param]) -> str:
    parts = []
    for i, p in enumerate(params):
        shape = (p.seen.storage_size,) if p.whole else p.seen.shape
        parts.append(f"x{i}: {' '.join(map(str, shape))}".rstrip())
    return ", ".join(parts)


def _target(name: str, fn: Callable[..., Any], params: Sequence[Param], random: bool) -> Target:
    if not params:  # a factory (aten::empty, a constant's copy): no input to run it at
        raise Unwritable("it has no tensor input")
    kinds = {f"x{i}": NoGrad() for i, p in enumerate(params) if not p.differentiable}
    target = Target(name, fn, _spec(params), family="user", dtypes=(torch.float64,), kinds=kinds)
    return seeded_alike(target) if random else target


def _at(params: Sequence[Param]) -> str:
    shown = [("whole storage of " if p.whole else "") + p.seen.describe() for p in params]
    return ", ".join(shown) if shown else "no tensor inputs"


def _found(alone: Verdict) -> str:
    """A piece's failure in a few words: what differed, without how it was confirmed."""
    return headline(alone.message).split("; confirmed")[0][:300]


def _outcome(alone: Verdict) -> str:
    exception = alone.errors.get("exception")
    return f"raised {exception} alone" if exception else alone.kind


def _run(check: Check, piece: Target, case: Case) -> Verdict:
    """The check's verdict on a piece; a case it cannot take is unsupported, not the caller's error."""
    try:
        return run_check(check, piece, case)
    except (CaseError, UnsatisfiedAssumption) as e:
        return Verdict("unsupported", f"the piece cannot be run at its inputs: {e}")


def _same_failure(failed: Verdict, again: Verdict) -> bool:
    return again.kind == "fail" and mismatch(failed, again) is None


def _plain(fn: Callable[..., Any], case: Case) -> BaseException | None:
    """What a plain eager call of ``fn`` at ``case`` raises (None: nothing)."""
    try:
        fn(*case.materialize(requires_grad=True).args)
    except Exception as e:  # noqa: BLE001 - the answer
        return e
    return None


# -- a numerical mismatch: op, rule or composition ----------------------------------------------


def _carries(op: OpSeen) -> bool:
    """The op carries the call's derivative: in grad mode, it reads a float64
    tensor derived from the arguments that requires grad, and makes one that does."""
    return (
        op.grad_enabled
        and any(t.derived and t.requires_grad and t.dtype == torch.float64 for t in op.inputs)
        and any(t.requires_grad for t in op.outputs)
    )


def _signature(op: OpSeen) -> tuple:
    return (op.op, tuple((t.shape, t.stride, t.offset, t.dtype, t.derived and t.requires_grad) for t in op.inputs))


def _op_rule_or_composition(
    check: Check,
    case: Case,
    trace: AtenTrace,
    applied: Sequence[_Applied],
    outputs: Sequence[torch.Tensor],
    clock: _Clock,
    failed: Verdict,
) -> Localized:
    reaching = trace.reaching(outputs)
    ops = [op for op in trace.ops if op.index in reaching and _carries(op)]
    first = {_signature(op): op for op in reversed(ops)}
    ordered = [op for op in ops if first[_signature(op)] is op] + [op for op in ops if first[_signature(op)] is not op]
    unsure: list[str] = []
    passed = 0
    for op in ordered:
        if not clock.left():
            return Localized(None, f"{NO_TIME}: {passed} of {len(ordered)} op(s) passed alone before the time ended")
        try:
            program = one_op(op)
            params = program.params or ()
            piece = _target(f"{op.name} alone", program.fn, params, program.random)
            at = _case(params, case, piece.name)
        except (Unwritable, CaseError) as e:
            unsure.append(f"{op.name} ({e})")
            continue
        singular = unjudged_at(op.name, at)
        if singular is not None:
            unsure.append(f"{op.name} ({singular})")
            continue
        clock.judged += 1
        alone = _run(check, piece, at)
        if alone.kind == "pass":
            passed += 1
            continue
        if alone.kind != "fail" or alone.errors.get("exception"):  # a mismatch, as the call's; not a raise
            unsure.append(f"{op.name} ({_outcome(alone)})")
            continue
        if not explains(alone, failed):
            unsure.append(f"{op.name} (fails alone with a non-finite derivative, where the call's is finite)")
            continue
        script = op_script(
            check.name,
            f"{op.name}.{op.overload} alone, at the inputs the failing call gave it, fails fuzzdiff's "
            f"{check.name} check",
            program.text,
            program.name,
            at.materialize(),
            alone,
            RANDOM_SEED if program.random else None,
        )
        return Localized(
            "op",
            f"{op.name}.{op.overload} fails the {check.name} check alone, at the inputs the call gave it: "
            f"{_found(alone)}",
            op.name,
            True,
            f"alone at {_at(params)}",
            script,
            clock.judged,
        )
    rules_unsure: list[str] = []
    rules = 0
    judged_classes: set[type] = set()
    for call in applied:
        if call.cls in judged_classes:
            continue
        if not clock.left():
            return Localized(None, f"{NO_TIME}: every op passed alone, and the time ended before the rules were run")
        judged_classes.add(call.cls)
        name = call.cls.__qualname__
        try:
            piece = _target(name, _applying(call), call.params, call.random)
            at = _case(call.params, case, name)
        except (Unwritable, CaseError) as e:
            rules_unsure.append(f"{name} ({e})")
            continue
        singular = unjudged_at(name, at)
        if singular is not None:
            rules_unsure.append(f"{name} ({singular})")
            continue
        clock.judged += 1
        alone = _run(check, piece, at)
        if alone.kind == "pass":
            rules += 1
            continue
        if alone.kind != "fail" or alone.errors.get("exception"):  # a mismatch, as the call's; not a raise
            rules_unsure.append(f"{name} ({_outcome(alone)})")
            continue
        module = getattr(call.cls, "__module__", "") or ""
        torchs = module == "torch" or module.startswith("torch.")
        return Localized(
            "rule",
            f"the rule {module}.{name} fails the {check.name} check alone, at the inputs it received (its "
            f"derivative against finite differences of its own forward): {_found(alone)}",
            f"{module}.{name}" if torchs else name,
            torchs,
            f"alone at {_at(call.params)}",
            None,
            clock.judged,
        )
    if unsure or rules_unsure:
        return Localized(
            None,
            f"not localized: no op or rule fails alone, but not every one could be judged alone "
            f"({', '.join([*unsure, *rules_unsure][:5])})",
            judged=clock.judged,
        )
    if not ops and not applied:
        return Localized(None, "not localized: the call has no op that carries its derivative", judged=clock.judged)
    return Localized(
        "composition",
        f"every op ({passed}) and rule ({rules}) of the call passes the {check.name} check alone, at the inputs it "
        f"received: the composition fails ({_cuts(trace, reaching)})",
        judged=clock.judged,
    )


def _cuts(trace: AtenTrace, reaching: set[int]) -> str:
    """How the code connects its ops so that the derivative differs, in
    words: the ``.detach()`` calls on the way to the outputs, by where they
    are, which is what a straight-through estimator is made of."""
    detached = [
        op
        for op in trace.ops
        if op.index in reaching and op.name == "aten::detach" and any(t.derived and t.requires_grad for t in op.inputs)
    ]
    if not detached:
        return (
            "how the code connects them: a detach, a no_grad block, an in-place write, a value taken out of the graph"
        )
    where = ", ".join(dict.fromkeys(op.where for op in detached))
    return (
        f"the code detaches a value on its way to the outputs, at {where}: no derivative flows there, by the "
        "code's choice; a straight-through estimator (x + (q - x).detach()) is built so, and its gradient is "
        "by design not the derivative of its forward"
    )


def _applying(call: _Applied) -> Callable[..., Any]:
    """The rule alone: its class applied to the tensors given, its other arguments as received."""

    def rule(*tensors: torch.Tensor) -> Any:
        flat, spec = tree_flatten((call.args, call.kwargs))
        args, kwargs = tree_unflatten([tensors[a.index] if isinstance(a, Slot) else a for a in flat], spec)
        cls: Any = call.cls
        return cls.apply(*args, **kwargs)

    return rule


# -- an exception: the op that raised it ------------------------------------------------------


def _by_the_raising_op(
    check: Check,
    target: Target,
    case: Case,
    verdict: Verdict,
    trace: AtenTrace,
    applied: Sequence[_Applied],
    clock: _Clock,
) -> Localized:
    where = verdict.errors.get("raised_in")
    candidates = [op for op in trace.ops if op.where == where]
    if not candidates:
        rule = _raising_rule(where, applied)
        if rule is not None:
            return rule
        # raised outside the call (in a backward the check ran): each op that carries the derivative, alone
        candidates = [op for op in trace.ops if _carries(op)]
    if not candidates:
        return Localized(None, f"not localized: the call runs no op at {where}, where it raised")
    for op in candidates:  # each op alone, under the check and in plain eager
        if not clock.left():
            return Localized(None, NO_TIME)
        try:
            program = one_op(op)
            params = program.params or ()
            piece = _target(f"{op.name} alone", program.fn, params, program.random)
            at = _case(params, case, piece.name)
        except (Unwritable, CaseError):
            continue
        clock.judged += 1
        if not _same_failure(verdict, _run(check, piece, at)) or _plain(program.fn, at) is not None:
            continue
        return _raised_by(check, op, program, at, verdict, _at(params), "alone", clock)
    arguments = len(case.args)
    for op in candidates:  # with the ops that make its inputs: a tangent's history
        if not clock.left():
            return Localized(None, NO_TIME)
        try:
            program = leading_to(trace, op.index, arguments)
        except Unwritable:
            continue
        piece = replace(target, name=f"{op.name} and the ops before it", fn=program.fn, origin=None, known=())
        clock.judged += 1
        if not _same_failure(verdict, _run(check, piece, case)) or _plain(program.fn, case) is not None:
            continue
        return _raised_by(check, op, program, case, verdict, _at_op(op), "after", clock)
    return Localized(
        None,
        f"not localized: none of the {len(candidates)} op(s) it was raised at raises it without the rest of the code",
        judged=clock.judged,
    )


# the methods of an autograd.Function that torch runs as its rules
_RULE_METHODS = ("forward", "setup_context", "backward", "jvp", "vjp", "vmap")


def _raising_rule(where: str | None, applied: Sequence[_Applied]) -> Localized | None:
    """The rule whose own code the error was raised in (``where``, as
    fuzzdiff.guards.raised words a frame): an error in a Function's backward
    is its author's, whatever the op it called there."""
    for call in applied:
        for method in _RULE_METHODS:
            code = getattr(getattr(call.cls, method, None), "__code__", None)
            if code is None or where is None:
                continue
            lines = [line for _, _, line in code.co_lines() if line is not None]
            if any(where == frame_text(code.co_filename, line, code.co_name) for line in dict.fromkeys(lines)):
                module = getattr(call.cls, "__module__", "") or ""
                torchs = module == "torch" or module.startswith("torch.")
                name = call.cls.__qualname__
                return Localized(
                    "rule",
                    f"raised in the rule {module}.{name}'s {method}, at the inputs it received",
                    f"{module}.{name}" if torchs else name,
                    torchs,
                    f"alone at {_at(call.params)}",
                )
    return None


def _at_op(op: OpSeen) -> str:
    return ", ".join(t.describe() for t in op.inputs) or "no tensor inputs"


def _raised_by(
    check: Check, op: OpSeen, program: Program, case: Case, verdict: Verdict, at: str, how: str, clock: _Clock
) -> Localized:
    error = verdict.errors.get("exception")
    before = list(dict.fromkeys(o.name for o in program.ops if o is not op))
    where = f"alone at {at}" if how == "alone" else f"after {', '.join(before)}, at {at}"
    if how == "alone":
        evidence = (
            f"{op.name}.{op.overload} raises this {error} alone under the {check.name} check, at the inputs the call "
            "gave it, where a plain call of it runs without error"
        )
    else:
        evidence = (
            f"{op.name}.{op.overload} raises this {error} under the {check.name} check as the "
            f"{len(program.ops) - 1} aten op(s) before it make its inputs ({', '.join(before)}), and runs without "
            "error in a plain call: no code of yours is needed"
        )
    script = op_script(
        check.name,
        f"{op.name}.{op.overload}, at the inputs the failing call gave it, raises under fuzzdiff's {check.name} check",
        program.text,
        program.name,
        case.materialize(),
        verdict,
        RANDOM_SEED if program.random else None,
    )
    return Localized("op", evidence, op.name, True, where, script, clock.judged)
