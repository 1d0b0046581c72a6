"""Keyword-argument strategies shared by the catalog modules.

Each helper returns a constant, a Hypothesis strategy or a ``FromShapes`` that
draws a value valid for the shapes that were drawn (a dim for the drawn rank,
a permutation of the dims, a window that fits), so a catalog entry stays one
declarative line. Values are plain ints, lists and dicts: they go into the
case JSON as they are, and every catalog ``fn`` accepts lists where torch
takes tuples, so a replayed case calls the op exactly as the fuzzed one did.
"""

from __future__ import annotations

import itertools
import math

from hypothesis import strategies as st

from fuzzdiff.targets.target import FromShapes

__all__ = [
    "rank",
    "dim",
    "dims",
    "opt_dims",
    "reduced",
    "nonempty_dim",
    "dim_with",
    "when",
    "groups",
    "keepdim",
    "permutation",
    "reductions",
    "window",
    "span",
    "expand_sizes",
    "reshape_sizes",
    "divisor",
    "conv_padding",
]

keepdim = st.booleans()
reductions = st.sampled_from(["mean", "sum", "none"])


def rank(shapes, arg: str) -> int:
    return len(shapes[arg])


def dim(arg: str = "x", extra: int = 0) -> FromShapes:
    """A valid dim (negative too) for ``arg``'s rank plus ``extra`` (stack: 1).
    A 0-dim tensor accepts dim 0 and -1, as torch does."""

    def strategy(shapes):
        r = max(rank(shapes, arg) + extra, 1)
        return st.integers(-r, r - 1)

    return FromShapes(strategy)


def dims(arg: str = "x", min_size: int = 1) -> FromShapes:
    """A list of distinct dims of ``arg`` (each as given, non-negative or negative)."""

    def strategy(shapes):
        r = rank(shapes, arg)
        if r == 0:
            return st.just([0]) if min_size else st.sampled_from([[], [0]])
        return st.lists(st.integers(0, r - 1), min_size=min_size, max_size=r, unique=True).flatmap(
            lambda ds: st.tuples(*[st.sampled_from([d, d - r]) for d in ds]).map(list)
        )

    return FromShapes(strategy)


def opt_dims(arg: str = "x") -> FromShapes:
    """None (reduce everything), one dim, or a list of distinct dims."""
    one, many = dim(arg), dims(arg)
    return FromShapes(lambda s: st.one_of(st.none(), one.fn(s), many.fn(s)))


def permutation(arg: str = "x") -> FromShapes:
    return FromShapes(lambda s: st.permutations(range(rank(s, arg))).map(list))


def divisor(arg: str, axis: int) -> FromShapes:
    """A positive divisor of ``arg``'s size along ``axis`` (groups of channels)."""

    def strategy(shapes):
        n = shapes[arg][axis]
        return st.sampled_from([d for d in range(1, n + 1) if n % d == 0] or [1])

    return FromShapes(strategy)


def span(arg: str = "x") -> FromShapes:
    """``[dim, start, length]`` of a slice that fits (narrow); needs rank >= 1."""

    @st.composite
    def draw(draw, shape):
        d = draw(st.integers(0, len(shape) - 1))
        start = draw(st.integers(0, shape[d]))
        length = draw(st.integers(0, shape[d] - start))
        return [draw(st.sampled_from([d, d - len(shape)])), start, length]

    return FromShapes(lambda s: draw(s[arg]))


def window(arg: str = "x") -> FromShapes:
    """``[dim, size, step]`` of windows that fit (Tensor.unfold); needs rank >= 1."""

    @st.composite
    def draw(draw, shape):
        d = draw(st.integers(0, len(shape) - 1))
        size = draw(st.integers(0, shape[d]))
        step = draw(st.integers(1, 3))
        return [d, size, step]

    return FromShapes(lambda s: draw(s[arg]))


def expand_sizes(arg: str = "x", max_new: int = 2, max_side: int = 3) -> FromShapes:
    """Sizes ``arg`` expands to: its size-1 dims grown, -1 kept, new leading dims."""

    @st.composite
    def draw(draw, shape):
        lead = draw(st.lists(st.integers(0, max_side), max_size=max_new))
        own = [draw(st.integers(0, max_side)) if n == 1 else draw(st.sampled_from([n, -1])) for n in shape]
        return lead + own

    return FromShapes(lambda s: draw(s[arg]))


def reshape_sizes(arg: str = "x") -> FromShapes:
    """A shape with the same number of elements: flattened, reversed, split or grown."""

    def strategy(shapes):
        shape = list(shapes[arg])
        n = 1
        for s in shape:
            n *= s
        options = [[-1], shape[::-1], [1] + shape + [1], [n]]
        if n:
            options += [[-1, shape[-1]] if shape else [1, -1], [n, 1, -1]]
        if n == 1:
            options.append([])
        return st.sampled_from(options)

    return FromShapes(strategy)


def conv_padding(x: str, w: str, spatial: int, max_dilation: int = 2) -> FromShapes:
    """Per spatial dim, a padding that leaves the (dilated) kernel room to fit."""

    def strategy(shapes):
        pads = []
        for d in range(1, spatial + 1):
            need = max_dilation * (shapes[w][-d] - 1) + 1 - shapes[x][-d]
            low = max(0, -(-need // 2))
            pads.append(st.integers(low, low + 1))
        return st.tuples(*reversed(pads)).map(list)

    return FromShapes(strategy)


def reduced(
    arg: str = "x", *, min_count: int = 1, single: bool = True, many: bool = True, full: bool = True
) -> FromShapes:
    """Dims for a reduction that is only finite over at least ``min_count`` values
    (mean, logsumexp: 1; var, std: 2): the reduced dims hold that many values,
    or the output is empty. ``single``: one int; ``many``: a list of dims;
    ``full``: None (every dim). Shapes with no such choice are rejected."""

    def strategy(shapes):
        shape = shapes[arg]
        r = len(shape)

        def ok(ds) -> bool:
            count = math.prod(shape[d] for d in ds)
            rest = math.prod(shape[d] for d in range(r) if d not in ds)
            return count >= min_count or rest == 0

        options: list[int | list[int] | None] = []
        if full and (ok(range(r)) if r else min_count <= 1):
            options.append(None)
        if r == 0 and min_count <= 1:
            options += [0, -1] if single else []
            options += [[0], [-1]] if many else []
        for k in range(1, r + 1):
            for ds in itertools.combinations(range(r), k):
                if not ok(ds):
                    continue
                if single and k == 1:
                    options += [ds[0], ds[0] - r]
                if many:
                    options += [list(ds), [d - r for d in ds]]
        return st.sampled_from(options) if options else st.nothing()

    return FromShapes(strategy)


def dim_with(arg: str = "x", ok=lambda n: True) -> FromShapes:
    """A dim of ``arg`` whose size satisfies ``ok`` (a 0-dim tensor: 0 or -1, taken
    as size 1); shapes with no such dim are rejected."""

    def strategy(shapes):
        shape = shapes[arg]
        if not shape:
            return st.sampled_from([0, -1]) if ok(1) else st.nothing()
        options = [v for d, n in enumerate(shape) if ok(n) for v in (d, d - len(shape))]
        return st.sampled_from(options) if options else st.nothing()

    return FromShapes(strategy)


def nonempty_dim(arg: str = "x") -> FromShapes:
    """A dim of ``arg`` with at least one element along it (a 0-dim tensor: 0 or -1)."""
    return dim_with(arg, lambda n: n > 0)


def when(predicate, value) -> FromShapes:
    """``value`` (a constant or strategy) for shapes that satisfy ``predicate(shapes)``;
    other shapes are rejected. For constraints between sizes a spec cannot say."""
    return FromShapes(
        lambda s: (value if isinstance(value, st.SearchStrategy) else st.just(value)) if predicate(s) else st.nothing()
    )


def groups(arg: str, axis: int = 1, min_values: int = 1) -> FromShapes:
    """A number of groups dividing ``arg``'s size along ``axis``, each group holding at
    least ``min_values`` values (the group's channels times the sizes after ``axis``)."""

    def strategy(shapes):
        shape = shapes[arg]
        n, rest = shape[axis], math.prod(shape[axis + 1 :])
        options = [g for g in range(1, n + 1) if n % g == 0 and (n // g) * rest >= min_values]
        return st.sampled_from(options) if options else st.nothing()

    return FromShapes(strategy)
