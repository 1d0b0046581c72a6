"""What the code under test did quietly while a check failed: torch errors it
caught itself, and warnings it gave.

A library that wraps ``torch.linalg.cholesky_ex`` in ``try: ... except
RuntimeError:`` and falls back to an eigendecomposition catches vmap's refusal
of its data-dependent ``if`` and goes on another way, with a warning. The vmap
check's two runs then differ by the library's choice, not by torch's batching:
whose bug it is (fuzzdiff.search.blame) turns on that catch. The catch is seen
by watching the torch functions the run calls: an exception one raised whose
traceback ends (its outermost frame, where it was handled) in the code under
test, not in torch or fuzzdiff, was caught there.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, resolve_name

__all__ = ["Quietly", "quietly"]

_TORCH = str(Path(torch.__file__).resolve().parent)
_FUZZDIFF = str(Path(__file__).resolve().parents[1])


def _users(filename: str) -> bool:
    """A frame or a warning of the code under test: neither torch's nor fuzzdiff's."""
    where = str(Path(filename).resolve()) if not filename.startswith("<") else filename
    return not where.startswith((_TORCH, _FUZZDIFF))


@dataclass(frozen=True)
class Quietly:
    """``caught``: the torch errors the code caught itself ("Tensor.__bool__
    raised RuntimeError: vmap: ... (caught in solve_spd, lib.py:12)");
    ``warned``: the warnings it gave ("UserWarning: falling back to eigh")."""

    caught: tuple[str, ...] = ()
    warned: tuple[str, ...] = ()


class _Raised(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.raised: list[tuple[Any, BaseException]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        try:
            return func(*args, **(kwargs or {}))
        except Exception as e:
            self.raised.append((func, e))
            raise


def quietly(call: Callable[[], Any]) -> Quietly:
    """Run ``call`` (a check's run at the failing case) and see what the code
    under test caught and warned meanwhile. What ``call`` raises is its own."""
    watch = _Raised()
    warned: list[str] = []

    def shown(message, category, filename, lineno, file=None, line=None) -> None:
        # the frame that called warn(), whatever stacklevel said: the first outside the warnings module
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename == warnings.__file__:
            frame = frame.f_back
        if frame is not None and _users(frame.f_code.co_filename):
            warned.append(f"{category.__name__}: {message}")

    with warnings.catch_warnings():  # restores the filters and showwarning
        warnings.simplefilter("always")
        warnings.showwarning = shown
        try:
            with watch:
                call()
        finally:
            caught = [_said(func, e) for func, e in watch.raised if _caught_by_user(e)]
            watch.raised.clear()  # the exceptions hold their frames
    return Quietly(tuple(dict.fromkeys(caught)), tuple(dict.fromkeys(warned)))


def _caught_by_user(error: BaseException) -> bool:
    tb = error.__traceback__
    return tb is not None and _users(tb.tb_frame.f_code.co_filename)


def _said(func: Any, error: BaseException) -> str:
    tb = error.__traceback__
    assert tb is not None
    code = tb.tb_frame.f_code
    name = resolve_name(func) or getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    first = (str(error).strip().splitlines() or [""])[0][:160]
    where = f"{code.co_name}, {Path(code.co_filename).name}:{tb.tb_lineno}"
    return f"{name} raised {type(error).__name__}: {first} (caught in {where})"
