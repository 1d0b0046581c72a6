"""The shape-spec mini-language (docs/pages/design.md, contract 3).

A spec names each positional tensor argument and its dims in jaxtyping's syntax,
so that one string says both which sizes are shared across arguments and which
may broadcast: ``"x: *b n m, w: m k"``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from fuzzdiff.errors import FuzzdiffError

__all__ = ["Dim", "ArgSpec", "SpecError", "parse_spec", "empty_dims", "bounded_below"]


class SpecError(FuzzdiffError, ValueError):
    """A malformed spec; the message quotes the spec and points at the bad token."""

    def __init__(self, spec: str, pos: int, reason: str):
        self.spec, self.pos, self.reason = spec, pos, reason
        super().__init__(f"{reason}\n  {spec}\n  {' ' * pos}^")


@dataclass(frozen=True)
class Dim:
    """One dimension token.

    kind is "name" (a shared size), "fixed" (an integer), "anon" (``_``),
    or, when ``variadic``, a group of zero or more dims ("name" or "anon" for ``...``).
    ``broadcast`` (``#``) lets this argument use 1 where the others use the shared size.
    ``low`` and ``high`` bound a named size (``n>=1``, ``n<=3``, ``n>=2<=5``; each
    dim of a named group), for functions undefined at some sizes: the bounds of
    a name hold wherever the name appears.
    """

    kind: str
    name: str | None = None
    size: int | None = None
    variadic: bool = False
    broadcast: bool = False
    low: int | None = None
    high: int | None = None

    def __str__(self) -> str:
        if self.kind == "fixed":
            return str(self.size)
        if self.kind == "anon":
            return "..." if self.variadic else "_"
        assert self.name is not None  # neither "fixed" nor "anon": a named dim
        bounds = ("" if self.low is None else f">={self.low}") + ("" if self.high is None else f"<={self.high}")
        return ("*" if self.variadic else "") + ("#" if self.broadcast else "") + self.name + bounds


@dataclass(frozen=True)
class ArgSpec:
    name: str
    dims: tuple[Dim, ...]

    def __str__(self) -> str:
        return f"{self.name}: {' '.join(map(str, self.dims))}".rstrip()


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_BOUNDS = re.compile(r"((>=|<=)\d+){1,2}\Z")


def _parse_dim(spec: str, token: str, pos: int) -> Dim:
    if token == "...":
        return Dim("anon", variadic=True)
    if token == "_":
        return Dim("anon")
    if token.isdigit():
        return Dim("fixed", size=int(token))
    rest, variadic, broadcast = token, False, False
    low = high = None
    bounds = _BOUNDS.search(rest)
    if bounds is not None:
        rest = rest[: bounds.start()]
        for op, value in re.findall(r"(>=|<=)(\d+)", bounds.group()):
            if op == ">=":
                low = int(value)
            else:
                high = int(value)
        if low is not None and high is not None and low > high:
            raise SpecError(
                spec, pos, f"bad bounds in {token!r}: the lower bound {low} is above the upper bound {high}"
            )
    elif any(c in rest for c in "<>="):
        raise SpecError(
            spec, pos, f"bad bounds in {token!r}: expected name>=LOW, name<=HIGH or name>=LOW<=HIGH with integers"
        )
    if rest.startswith("*"):
        variadic, rest = True, rest[1:]
    if rest.startswith("#"):
        broadcast, rest = True, rest[1:]
    if rest == "_" and not broadcast:
        return Dim("anon", variadic=variadic)
    if not _IDENT.match(rest):
        raise SpecError(
            spec, pos, f"bad dimension {token!r}: expected a name, an integer, '_', '...', '*name', '#name' or '*#name'"
        )
    if (low is not None or high is not None) and not _IDENT.match(rest.lstrip("*#")):
        raise SpecError(spec, pos, f"bad dimension {token!r}: bounds go after a name, e.g. n>=1")
    return Dim("name", name=rest, variadic=variadic, broadcast=broadcast, low=low, high=high)


def parse_spec(spec: str) -> tuple[ArgSpec, ...]:
    """Parse ``"x: *b n m, w: m k"`` into one ArgSpec per argument, in order."""
    if not isinstance(spec, str):
        raise TypeError(f"a shape spec must be a str, got {type(spec).__name__}")
    return _parse_spec(spec)


@functools.lru_cache(maxsize=1024)
def _parse_spec(spec: str) -> tuple[ArgSpec, ...]:
    # Cached: Target.args re-parses its spec on every access, several times per
    # drawn case; the result is immutable (a tuple of frozen dataclasses).
    args: list[ArgSpec] = []
    seen: set[str] = set()
    pos = 0
    for chunk in spec.split(","):
        start = pos
        pos += len(chunk) + 1
        if not chunk.strip():
            raise SpecError(spec, start, "empty argument entry")
        if ":" not in chunk:
            at = start + len(chunk) - len(chunk.lstrip())
            raise SpecError(spec, at, f"argument entry {chunk.strip()!r} needs 'name: dims'")
        head, _, body = chunk.partition(":")
        name = head.strip()
        name_at = start + len(head) - len(head.lstrip())
        if not _IDENT.match(name):
            raise SpecError(spec, name_at, f"bad argument name {name!r}")
        if name in seen:
            raise SpecError(spec, name_at, f"argument {name!r} appears twice")
        seen.add(name)
        dims: list[Dim] = []
        body_at = start + len(head) + 1
        variadics = 0
        for m in re.finditer(r"\S+", body):
            dim = _parse_dim(spec, m.group(), body_at + m.start())
            if dim.variadic:
                variadics += 1
                if variadics > 1:
                    raise SpecError(spec, body_at + m.start(), f"argument {name!r} has more than one variadic group")
            dims.append(dim)
        args.append(ArgSpec(name, tuple(dims)))
    return _shared_bounds(spec, tuple(args))


def _shared_bounds(spec: str, args: tuple[ArgSpec, ...]) -> tuple[ArgSpec, ...]:
    """Give every occurrence of a name the bounds written at any of them."""
    low: dict[str, int] = {}
    high: dict[str, int] = {}
    for arg in args:
        for d in arg.dims:
            if d.kind == "name" and d.name is not None:
                if d.low is not None:
                    low[d.name] = max(low.get(d.name, d.low), d.low)
                if d.high is not None:
                    high[d.name] = min(high.get(d.name, d.high), d.high)
    if not low and not high:
        return args
    for name in low.keys() & high.keys():
        if low[name] > high[name]:
            raise SpecError(
                spec, spec.find(name), f"the bounds of {name!r} leave no size: >={low[name]} and <={high[name]}"
            )
    return tuple(
        ArgSpec(
            a.name,
            tuple(
                replace(d, low=low.get(d.name), high=high.get(d.name)) if d.kind == "name" and d.name is not None else d
                for d in a.dims
            ),
        )
        for a in args
    )


def empty_dims(args: Sequence[ArgSpec], shapes: Sequence[Sequence[int]]) -> tuple[str, ...]:
    """The names of the dims that are 0 in ``shapes`` (one per argument, drawn
    for ``args``), sorted: a variadic group's by the group's name, an
    anonymous dim as "_". A shape whose rank does not fit its spec is passed over."""
    empty: set[str] = set()
    for arg, shape in zip(args, shapes):
        if 0 not in shape:
            continue
        variadic = sum(d.variadic for d in arg.dims)
        spread = len(shape) - (len(arg.dims) - variadic)
        if spread < 0 or (not variadic and spread):
            continue
        sizes = iter(shape)
        for dim in arg.dims:
            for size in [next(sizes) for _ in range(spread if dim.variadic else 1)]:
                if size == 0 and dim.kind != "fixed":
                    empty.add(dim.name if dim.kind == "name" and dim.name is not None else "_")
    return tuple(sorted(empty))


def bounded_below(spec: str, names: Sequence[str], low: int = 1) -> str:
    """``spec`` with each dim named in ``names`` bounded below by ``low`` (a
    bound it has already kept where it is higher), as one writes it."""
    chosen = set(names)
    return ", ".join(
        str(
            ArgSpec(
                a.name,
                tuple(
                    replace(d, low=max(low, d.low or 0)) if d.kind == "name" and d.name in chosen else d for d in a.dims
                ),
            )
        )
        for a in parse_spec(spec)
    )
