"""Inputs outside the user's function's domain: those where it raises in
plain eager use. ``fuzzdiff.check`` reports such an input once, as an
``input-domain`` failure, and rejects such inputs from then on, by every check.

What the report advises depends on where the error was raised. ``invalid=``
declares an exception type outside the domain wherever it is raised: fitting
for the code's own ``raise`` (or a non-torch function it calls), never for an
error raised inside a torch op at an input the spec allows (a CPU FFT of an
empty batch), which it would hide wherever torch raised it, bugs included;
there a spec bound (``n>=1``) is the advice (fuzzdiff.checking.report).
And where a torch op raises at an empty batch it carries into its result
(fuzzdiff.checking.empty_batch), the input is no domain's edge at all: the
error is torch's, reported as a failure of the check that met it, and
such inputs are rejected from then on, so that it is reported once.
"""

from __future__ import annotations

import ast
import builtins
import dis
import functools
import linecache
import os
import re
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any, NamedTuple

import torch
from hypothesis import reject
from torch.utils._pytree import tree_leaves

from fuzzdiff.case.case import Case
from fuzzdiff.checking import empty_batch
from fuzzdiff.checking.empty_batch import raising_call, refuses_empty_batch
from fuzzdiff.guards.torch_state import let_go
from fuzzdiff.search.outcome import DOMAIN, FuzzFailure
from fuzzdiff.search.root_cause import message_pattern
from fuzzdiff.targets.target import Target

__all__ = ["DOMAIN", "DomainError", "domain_error", "raised_where", "rejecting"]


class DomainError(NamedTuple):
    """The function raising at its input in plain eager use: ``rule`` rejects
    such errors from then on ((type, message pattern)), ``message`` says
    what was found. ``torchs``: where a torch op raised at an empty batch it
    takes (fuzzdiff.checking.empty_batch), why the error is torch's: then
    the input is in the domain, and the failure is a finding."""

    rule: tuple[str, str]
    message: str
    torchs: str | None = None


def domain_error(target: Target, failure: FuzzFailure) -> DomainError | None:
    """Whether ``failure`` is the function raising at its input in plain eager
    use: in its call, or in its backward (an empty batch its backward cannot
    take), whatever check came upon it. Then the rule that rejects such
    errors from then on, and the finding's message; None for any other
    failure (an error only under a transform is that check's finding)."""
    if not isinstance(failure.verdict.errors.get("exception"), str):
        return None
    found = _eager_error(target, failure.case)
    if found is None:
        return None
    error, where, torchs = found
    kind = type(error).__name__
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    if BROKEN_RULE.search(first):
        let_go(error)
        return None  # a derivative rule that breaks autograd's contract: a bug at every input, no domain
    if torchs is not None:
        let_go(error)
        return DomainError((kind, message_pattern(first)), f"the function raises {kind} {where}: {first[:300]}", torchs)
    origin, call = raised_where(error)
    let_go(error)
    message = f"the function raises {kind} at this input, {where}: {first[:300]}"
    if origin == "own":
        message += f" (invalid=({kind},) declares such inputs outside its domain)"
    elif origin == "torch":
        message += f"; it is raised inside torch ({call}), at an input the spec allows"
    elif call is not None:
        message += f"; it is raised inside {call}"
    return DomainError((kind, message_pattern(first)), message)


def raised_where(error: BaseException) -> tuple[str, str | None]:
    """Whose code raised ``error`` (its root cause): "own" (a ``raise`` of
    the code under test, or a function outside torch that it calls),
    "torch" (a torch op it calls, a tensor's operator or index, torch's own
    Python), or "unknown"; and that call as written, where it is known."""
    root = error
    while root.__cause__ is not None and root.__cause__ is not root:
        root = root.__cause__
    tb = root.__traceback__
    if tb is None:
        return "unknown", None
    frames = []
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    # the watch for the torch function that raised (fuzzdiff.checking.empty_batch) is no one's code
    tb = next(t for t in reversed(frames) if t.tb_frame.f_code.co_filename != empty_batch.__file__ or t is frames[0])
    code = tb.tb_frame.f_code
    if _TORCH in code.co_filename:
        at = code.co_filename[code.co_filename.rfind(_TORCH) + 1 :]
        return "torch", f"{code.co_name} in {at}"
    instruction = next((i for i in dis.get_instructions(code) if i.offset == tb.tb_lasti), None)
    if instruction is None:
        return "unknown", None
    if instruction.opname in ("RAISE_VARARGS", "RERAISE"):
        return "own", None
    node = _expression(code.co_filename, getattr(instruction, "positions", None))  # Python 3.11 on
    if node is None:
        return "unknown", None
    return _whose_call(node, tb), ast.unparse(node.func if isinstance(node, ast.Call) else node)


_TORCH = os.sep + "torch" + os.sep
# autograd's engine refusing what a custom Function's backward returned (too
# many or too few gradients, one of another shape or dtype): the rule breaks
# autograd's contract whatever the input, a finding of the check that met it
BROKEN_RULE = re.compile(
    r"returned an incorrect number of gradients|returned an invalid gradient at index|"
    r"Function \w+ returned an invalid gradient"
)
_UNKNOWN = object()


def _expression(filename: str, positions: Any) -> ast.expr | None:
    """The expression an instruction runs (``positions``: its dis.Positions), parsed from its source."""
    if positions is None or None in (positions.lineno, positions.end_lineno, positions.col_offset):
        return None
    lines = [linecache.getline(filename, n).encode() for n in range(positions.lineno, positions.end_lineno + 1)]
    if not lines or not lines[0]:
        return None
    lines[-1] = lines[-1][: positions.end_col_offset]
    lines[0] = lines[0][positions.col_offset :]
    try:
        tree = ast.parse(b"".join(lines).decode().strip(), mode="eval")
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return None
    return tree.body


def _whose_call(node: ast.expr, tb: TracebackType) -> str:
    """Whose a call (or an operator, an index) is: "torch", "own" or "unknown"."""
    frame = tb.tb_frame
    if isinstance(node, ast.Call):
        func = _value(node.func, frame)
        if func is not _UNKNOWN:
            return "torch" if _torchs(func) else "own"
        if isinstance(node.func, ast.Attribute) and hasattr(torch.Tensor, node.func.attr):
            return "torch"  # a method of a tensor the expression computes
        return "unknown"
    names = (_value(n, frame) for n in ast.walk(node) if isinstance(n, ast.Name))
    return "torch" if any(isinstance(v, torch.Tensor) for v in names) else "unknown"


def _value(node: ast.expr, frame: FrameType) -> Any:
    """What a name or a chain of attributes stands for in ``frame``, without
    calling anything the code defines; _UNKNOWN for any other expression."""
    if isinstance(node, ast.Name):
        for scope in (frame.f_locals, frame.f_globals, vars(builtins)):
            if node.id in scope:
                return scope[node.id]
        return _UNKNOWN
    if isinstance(node, ast.Attribute):
        owner = _value(node.value, frame)
        if owner is _UNKNOWN or not isinstance(owner, (type(os), type, torch.Tensor)):
            return _UNKNOWN
        return getattr(owner, node.attr, _UNKNOWN)
    return _UNKNOWN


def _torchs(fn: Any) -> bool:
    """Whether ``fn`` is torch's: a torch function, op or module's, or a tensor's method."""
    if isinstance(getattr(fn, "__self__", None), torch.Tensor):
        return True
    owner = getattr(fn, "__objclass__", None)
    if isinstance(owner, type) and issubclass(owner, torch._C.TensorBase):
        return True
    module = getattr(fn, "__module__", None) or getattr(getattr(fn, "__self__", None), "__name__", None) or ""
    return isinstance(module, str) and (module == "torch" or module.startswith("torch."))


def _eager_error(target: Target, case: Case) -> tuple[BaseException, str, str | None] | None:
    """What the target raises at ``case`` in plain eager use, and where: its
    call without autograd, else its call and backward (a cotangent of ones);
    and why the error is torch's, where a torch op raised it at an empty
    batch it takes (fuzzdiff.checking.empty_batch)."""
    args = case.materialize(requires_grad=False).args

    def plain() -> None:
        with torch.no_grad():
            target(*args, **case.kwargs)

    error, raising = raising_call(plain)
    if error is not None:
        return error, "in its plain call", None if raising is None else refuses_empty_batch(raising)
    try:
        inputs = case.materialize()
        outs = [t for t in tree_leaves(target(*inputs.args, **case.kwargs)) if _differentiable(t)]
        if outs and inputs.leaves:
            torch.autograd.grad(outs, inputs.leaves, [torch.ones_like(o) for o in outs], allow_unused=True)
    except Exception as e:  # noqa: BLE001
        return e, "in its backward", None
    return None


def _differentiable(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())


def rejecting(fn: Callable[..., Any], outside: tuple[type[BaseException], ...]) -> Callable[..., Any]:
    """``fn``, with its exceptions of the types in ``outside`` turned into a
    rejected example (Hypothesis draws another), not a failure."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except outside:
            reject()

    return call
