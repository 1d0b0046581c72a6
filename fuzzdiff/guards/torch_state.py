"""torch's thread-local state, which an error deep inside torch can leave changed.

An exception that unwinds through AOTAutograd or functorch can skip the C++
guards that were to put torch's dispatch state back: ``aot_function`` of
``torch.func.jvp`` over a captured constant fails an internal assert and
leaves the Autograd keys excluded, and from then on every backward in the
process raises "element 0 of tensors does not require grad"; a failed fake
tensor conversion leaves the Python key excluded ("you set no_dispatch()").
Every later check in that process would fail, and none of it would be the
target's doing.

So each check's run is bracketed by ``kept()``. What changed is put back, where torch offers a way to, and named, so
that the run that broke the process is known and the runs after it are not
its victims. What cannot be put back (``Left.lasting``) taints the
process: its later failures are not believed until they replay elsewhere.
"""

from __future__ import annotations

import traceback
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.autograd.forward_ad as forward_ad
from torch.overrides import _get_current_function_mode_stack
from torch.overrides import _pop_mode as _pop_function_mode
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
from torch.utils._python_dispatch import _pop_mode as _pop_dispatch_mode

__all__ = [
    "let_go",
    "TorchState",
    "Left",
    "snapshot",
    "kept",
    "run",
    "settle",
    "repaired",
    "note",
    "disturbances",
    "last_disturbance",
]


class TorchState(NamedTuple):
    """The thread-local settings a check's run must leave as it found them.
    Dispatch key sets as their raw bits, and a tuple: taken twice a run, a
    snapshot must cost a microsecond or two."""

    grad: bool
    forward_grad: bool
    inference: bool
    excluded: int
    included: int
    functorch_level: int | None
    dispatch_modes: int
    function_modes: int
    dual_level: int
    default_dtype: torch.dtype


def snapshot() -> TorchState:
    C = torch._C
    return TorchState(
        C.is_grad_enabled(),
        C._is_fwd_grad_enabled(),
        C.is_inference_mode_enabled(),
        C._dispatch_tls_local_exclude_set().raw_repr(),
        C._dispatch_tls_local_include_set().raw_repr(),
        C._functorch.maybe_current_level(),
        C._len_torch_dispatch_stack(),
        C._len_torch_function_stack(),
        forward_ad._current_level,
        C.get_default_dtype(),
    )


@dataclass
class Left:
    """What a run left changed: ``fixed`` was put back, ``lasting`` could not be."""

    fixed: tuple[str, ...] = ()
    lasting: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.fixed or self.lasting)

    def __str__(self) -> str:
        parts = []
        if self.fixed:
            parts.append(f"{'; '.join(self.fixed)} (put back)")
        if self.lasting:
            parts.append(f"{'; '.join(self.lasting)} (cannot be put back)")
        return "torch's thread-local state was left changed: " + "; ".join(parts)


class kept:
    """Run the block, then put back what it changed of torch's thread-local
    state; the ``Left`` it yields says what that was, once the block is done.
    The dispatch key sets are put back whole by torch's own guard (several of
    their keys have no Python name to set one by one).

    Within one ``run()`` a block also finds the key sets as the block before
    it left them, the first one as its caller had them: a guard of a call
    that raised, kept alive by a reference to its frames (a log record
    holding the exception), sets them back to what it saw when it is freed
    at last, between two blocks, or between two runs.

    A class rather than a generator: it wraps every run of a check."""

    __slots__ = ("_before", "_guard", "_left")

    def __enter__(self) -> Left:
        if _RUNNING[0] and _LAST[0] is not None:
            before, _ = _repair(_LAST[0], "between two runs")
        else:
            before = snapshot()
        _CLEAN.append(before)
        self._before, self._left = before, Left()
        self._guard = torch._C._PreserveDispatchKeyGuard()
        self._guard.__enter__()
        return self._left

    def __exit__(self, *exc: object) -> None:
        left = self._left
        try:
            try:
                left.fixed, left.lasting = _put_back(self._before)
            finally:
                self._guard.__exit__(None, None, None)
        finally:
            _CLEAN.pop()
        if _RUNNING[0] and exc[0] is None:  # put back as it was, but for what lasts
            _LAST[0] = snapshot() if left.lasting else self._before


_LAST: list[TorchState | None] = [None]  # the state the last block of the current run left
_RUNNING = [False]
# The clean states to come back to: this process's own (``settle``), then those
# the enclosing ``kept()`` blocks began in, outermost first.
_CLEAN: list[TorchState] = []
_HELD: list = []  # the guards that force the key sets (see _force_keys)


@contextmanager
def run() -> Iterator[None]:
    """A sequence of ``kept()`` blocks with nothing of the caller's between
    them (one fuzzing run): each finds the key sets as the last one left them,
    and the first one as the outermost caller had them (``settle``, or the
    enclosing ``kept()``)."""
    outer = _LAST[0], _RUNNING[0]
    _LAST[0], _RUNNING[0] = (_CLEAN[0] if _CLEAN else None), True
    try:
        yield
    finally:
        _LAST[0], _RUNNING[0] = outer


def settle() -> None:
    """Take this thread's state now as the clean one of a process of
    fuzzdiff's own (a campaign worker), for every later run to come back to."""
    _CLEAN.insert(0, snapshot())


def repaired(reference: TorchState | None = None, when: str = "since the last run") -> str | None:
    """Set the key sets back to ``reference``'s (default: the clean state)
    where something changed them late; what changed, noted, or None."""
    reference = reference or (_CLEAN[0] if _CLEAN else None)
    if reference is None:
        return None
    return _repair(reference, when)[1]


def _repair(reference: TorchState, when: str) -> tuple[TorchState, str | None]:
    """``repaired``: the state as it is afterwards, and what changed."""
    now = snapshot()
    if (now.excluded, now.included) == (reference.excluded, reference.included):
        return now, None
    change = "; ".join(
        f"dispatch keys {_key_change(was, is_, which)}"
        for which, was, is_ in (
            ("excluded", reference.excluded, now.excluded),
            ("included", reference.included, now.included),
        )
        if was != is_
    )
    event = f"torch's thread-local state changed {when} (an object of an earlier run freed late): {change}"
    note(event)
    _force_keys(reference)
    return snapshot(), event


def _force_keys(state: TorchState) -> None:
    """Set the thread's local key sets to ``state``'s. torch offers no setter
    for a whole set, only a guard that forces one until it exits; it is
    entered and held, never exited, so the sets stay as forced."""
    guard = torch._C._ForceDispatchKeyGuard(
        torch._C.DispatchKeySet.from_raw_repr(state.included), torch._C.DispatchKeySet.from_raw_repr(state.excluded)
    )
    guard.__enter__()
    _HELD.append(guard)


def _put_back(before: TorchState) -> tuple[tuple[str, ...], tuple[str, ...]]:
    after = snapshot()
    if after == before:
        return (), ()
    fixed: list[str] = []
    lasting: list[str] = []
    sets = (("excluded", before.excluded, after.excluded), ("included", before.included, after.included))
    for which, was, now in sets:
        if was != now:
            fixed.append(f"dispatch keys {_key_change(was, now, which)}")
    if after.grad != before.grad:
        torch._C._set_grad_enabled(before.grad)
        fixed.append(f"grad mode left {'on' if after.grad else 'off'}")
    if after.forward_grad != before.forward_grad:
        torch._C._set_fwd_grad_enabled(before.forward_grad)
        fixed.append(f"forward grad left {'on' if after.forward_grad else 'off'}")
    while forward_ad._current_level > before.dual_level:
        forward_ad.exit_dual_level()
        fixed.append("a forward-AD dual level left open")
    while len(_get_current_dispatch_mode_stack()) > before.dispatch_modes:
        fixed.append(f"dispatch mode {type(_pop_dispatch_mode()).__name__} left on")
    while len(_get_current_function_mode_stack()) > before.function_modes:
        fixed.append(f"function mode {type(_pop_function_mode()).__name__} left on")
    if after.default_dtype != before.default_dtype:
        torch.set_default_dtype(before.default_dtype)
        fixed.append(f"default dtype left at {after.default_dtype}")
    if after.inference != before.inference:
        lasting.append(f"inference mode left {'on' if after.inference else 'off'}")
    if after.functorch_level != before.functorch_level:
        lasting.append(f"functorch transform level {after.functorch_level} active ({before.functorch_level} before)")
    return tuple(fixed), tuple(lasting)


def _key_change(was: int, now: int, which: str) -> str:
    """How a thread's local key set changed, by the names torch prints."""
    old, new = _names(was), _names(now)
    words = []
    if new - old:
        words.append(f"left {which}: {', '.join(sorted(new - old))}")
    if old - new:
        words.append(f"no longer {which}: {', '.join(sorted(old - new))}")
    return "; ".join(words) or f"{which} {was:#x}, now {now:#x}"


def _names(raw: int) -> set[str]:
    text = str(torch._C.DispatchKeySet.from_raw_repr(raw))  # DispatchKeySet(A, B, ...)
    inner = text[text.find("(") + 1 : text.rfind(")")]
    return {k.strip() for k in inner.split(",") if k.strip()}


# What disturbed this process so far (a run that left torch's state changed,
# a failed internal assert, an error inside torch's compiler or transforms):
# the few latest, for a failure that replays elsewhere as a pass to name
# what came before it, and a count, for a campaign to replace its worker.
_DISTURBANCES: deque[str] = deque(maxlen=8)
_COUNT = [0]


def note(event: str) -> None:
    """Remember that ``event`` may have left this process unlike a fresh one."""
    _DISTURBANCES.append(event)
    _COUNT[0] += 1


def disturbances() -> int:
    """How many disturbances this process has seen."""
    return _COUNT[0]


def last_disturbance() -> str | None:
    return _DISTURBANCES[-1] if _DISTURBANCES else None


def let_go(error: BaseException) -> None:
    """Free the frames of ``error``'s traceback (and of the errors it chains)
    now, within ``kept()``: a dispatch-key guard that torch created inside a
    call that raised lives on in those frames, and when it is freed it sets
    the thread's dispatch keys back to what it saw, long after the run, in
    whatever runs then (aot_function of jvp over a captured constant leaves
    every later backward of the process without autograd that way)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [error]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        traceback.clear_frames(e.__traceback__)
        e.__traceback__ = None
        todo += [e.__cause__, e.__context__]
