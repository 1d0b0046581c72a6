"""Small straight-line torch programs (fuzzdiff.case.programs) over given input shapes.

Each statement is drawn against the shapes of the values so far, tracked on
the ``meta`` device, so every drawn program runs. Statements are drawn one at
a time behind a continue-coin, as ``st.lists`` does, so Hypothesis shrinks a
program by deleting statements and simplifying each toward the first input,
the first op of its kind and small parameters.

In-place statements write only to values without internal overlap (an
expanded view cannot be written), and preferably to views: writes through
views are where compiled programs differ from eager ones. What they read
besides never shares memory with what they write (torch refuses a write
whose source overlaps it in part), so a value's base is tracked too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import DrawFn, SearchStrategy

from fuzzdiff.case.programs import FUNCTIONS, OPS, Program
from strategies._drawing import COIN
from strategies._validation import check_int, check_range

__all__ = ["programs", "KINDS"]

KINDS = ("view", "inplace", "functional")
SCALARS = (0.5, -1.5, 2.0, -0.25)
BOUNDS = (-1.0, -0.5, 0.0, 0.5, 1.0)
Statement = dict[str, Any]  # one JSON statement (fuzzdiff.case.programs)
_BY_KIND = {k: tuple(name for name, op in OPS.items() if op.kind == k) for k in KINDS}


def programs(
    shapes: Sequence[Sequence[int]],
    *,
    min_size: int = 3,
    max_size: int = 8,
    kinds: Sequence[str] = KINDS,
    functions: Sequence[str] | None = None,
) -> SearchStrategy[Program]:
    """Programs (as ``Program``) over inputs of ``shapes``, with ``min_size`` to
    ``max_size`` statements, each of one of ``kinds`` ("view", "inplace",
    "functional"); ``functions`` restricts the functional ops (default: all of
    fuzzdiff.case.programs.FUNCTIONS)."""
    if isinstance(shapes, (str, bytes)) or not 1 <= len(shapes) <= 3:
        raise InvalidArgument(f"shapes must be a list of 1 to 3 shapes, got {shapes!r}")
    for s in shapes:
        for n in s:
            check_int(n, "a size in shapes", min_value=0)
    check_range(min_size, max_size, "min_size", "max_size")
    kinds = tuple(kinds)
    if not kinds or set(kinds) - set(KINDS):
        raise InvalidArgument(f"kinds must be a non-empty subset of {KINDS}, got {kinds!r}")
    functions = tuple(FUNCTIONS) if functions is None else tuple(functions)
    if not functions or set(functions) - set(FUNCTIONS):
        raise InvalidArgument(f"functions must be a non-empty subset of {tuple(FUNCTIONS)}, got {functions!r}")
    return _programs(tuple(tuple(int(n) for n in s) for s in shapes), min_size, max_size, kinds, functions)


@st.composite
def _programs(
    draw: DrawFn,
    shapes: tuple[tuple[int, ...], ...],
    min_size: int,
    max_size: int,
    kinds: tuple[str, ...],
    functions: tuple[str, ...],
) -> Program:
    values = [torch.empty(s, device="meta") for s in shapes]
    views: set[int] = set()
    bases = list(range(len(values)))  # the value whose memory each value is (a view's base's)
    body: list[Statement] = []
    while len(body) < max_size and (len(body) < min_size or draw(COIN)):
        kind = draw(st.sampled_from(kinds))
        s = _DRAW[kind](draw, values, views, bases, functions)
        if s is None:  # no value this kind can apply to: a functional statement instead
            s = _functional(draw, values, views, bases, functions)
        out = OPS[s["op"]].run(values, s)
        made = OPS[s["op"]].kind
        if made == "view" or (made == "inplace" and s["x"] in views):
            views.add(len(values))
        # a view, and an in-place statement's result (its input itself), share their input's memory
        bases.append(len(values) if made == "functional" else bases[s["x"]])
        values.append(out)
        body.append(s)
    return Program(len(shapes), tuple(body))


def _pick(draw: DrawFn, candidates: list[int]) -> int | None:
    return draw(st.sampled_from(candidates)) if candidates else None


def _view(
    draw: DrawFn, values: list[torch.Tensor], views: set[int], bases: list[int], functions: tuple[str, ...]
) -> Statement | None:
    op = draw(st.sampled_from(_BY_KIND["view"]))
    rank = {"slice": 1, "select": 1, "transpose": 2, "view": 0, "expand": 0}[op]
    x = _pick(
        draw, [k for k, v in enumerate(values) if v.dim() >= rank and (op != "select" or any(n > 0 for n in v.shape))]
    )
    if x is None:
        return None
    shape = list(values[x].shape)
    if op == "slice":
        dim = draw(st.integers(0, len(shape) - 1))
        start = draw(st.integers(0, max(shape[dim] - 1, 0)))
        return {
            "op": op,
            "x": x,
            "dim": dim,
            "start": start,
            "stop": draw(st.none() | st.integers(start, shape[dim])),
            "step": draw(st.integers(1, 2)),
        }
    if op == "select":
        dim = draw(st.sampled_from([d for d, n in enumerate(shape) if n > 0]))
        return {"op": op, "x": x, "dim": dim, "index": draw(st.integers(-shape[dim], shape[dim] - 1))}
    if op == "transpose":
        d0 = draw(st.integers(0, len(shape) - 1))
        return {"op": op, "x": x, "dim0": d0, "dim1": draw(st.integers(0, len(shape) - 1))}
    if op == "view":  # insert or remove a size-1 dim: a view at any strides
        ones = [d for d, n in enumerate(shape) if n == 1]
        # bool(): after "ones and", mypy would read draw(COIN) as drawing a list of ints
        if bool(ones) and draw(COIN):
            del shape[draw(st.sampled_from(ones))]
        else:
            shape.insert(draw(st.integers(0, len(shape))), 1)
        return {"op": op, "x": x, "shape": shape}
    # expand: a new leading dim, or a size-1 dim broadcast
    ones = [d for d, n in enumerate(shape) if n == 1]
    if bool(ones) and draw(COIN):
        shape[draw(st.sampled_from(ones))] = draw(st.integers(2, 3))
    else:
        shape.insert(0, draw(st.integers(1, 3)))
    return {"op": op, "x": x, "shape": shape}


def _writable(v: torch.Tensor) -> bool:
    return not any(st_ == 0 and n > 1 for n, st_ in zip(v.shape, v.stride()))


def _broadcasts_to(src: torch.Tensor, dst: torch.Tensor) -> bool:
    try:
        return torch.broadcast_shapes(src.shape, dst.shape) == dst.shape
    except RuntimeError:
        return False


def _inplace(
    draw: DrawFn, values: list[torch.Tensor], views: set[int], bases: list[int], functions: tuple[str, ...]
) -> Statement | None:
    op = draw(st.sampled_from(_BY_KIND["inplace"]))
    writable = [k for k, v in enumerate(values) if _writable(v)]
    x = _pick(draw, sorted(writable, key=lambda k: (k not in views, k)))
    if x is None:
        return None
    others = [k for k, v in enumerate(values) if bases[k] != bases[x] and _broadcasts_to(v, values[x])]
    if op == "clamp_":
        lo, hi = sorted(draw(st.lists(st.sampled_from(BOUNDS), min_size=2, max_size=2, unique=True)))
        return {"op": op, "x": x, "min": lo, "max": hi}
    if op == "copy_":
        other = _pick(draw, others)
        return None if other is None else {"op": op, "x": x, "other": other}
    other = _pick(draw, others) if bool(others) and draw(COIN) else None
    return {"op": op, "x": x, "other": other, "scalar": None if other is not None else draw(st.sampled_from(SCALARS))}


def _functional(
    draw: DrawFn, values: list[torch.Tensor], views: set[int], bases: list[int], functions: tuple[str, ...]
) -> Statement:
    fn = draw(st.sampled_from(functions))
    x = draw(st.integers(0, len(values) - 1))
    if FUNCTIONS[fn][2] == 1:
        return {"op": "call", "fn": fn, "x": x, "other": None}
    others = [k for k, v in enumerate(values) if _broadcastable(v, values[x])]
    return {"op": "call", "fn": fn, "x": x, "other": draw(st.sampled_from(others))}


def _broadcastable(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        torch.broadcast_shapes(a.shape, b.shape)
        return True
    except RuntimeError:
        return False


_DRAW: dict[str, Callable[[DrawFn, list[torch.Tensor], set[int], list[int], tuple[str, ...]], Statement | None]] = {
    "view": _view,
    "inplace": _inplace,
    "functional": _functional,
}
