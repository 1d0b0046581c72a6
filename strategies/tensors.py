"""Real tensors for your own Hypothesis tests, drawn as fuzzdiff's checks draw them.

``tensors()`` draws a shape (or takes one), values in a domain, and a memory
layout: permuted strides, step slices, a storage offset, stride 0
(``expand``) and channels_last, each feature drawn on its own. ``aliased()``
draws several tensors that share one storage: the same tensor twice,
overlapping or disjoint views. Both shrink toward small, contiguous,
unaliased tensors of plain values, so a failing test reports the simplest
layout that still fails.

    from hypothesis import given
    from strategies import tensors

    @given(tensors(dtype=torch.float64, domain=(0.0, None)))
    def test_my_sqrt_grad(x):
        ...
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from hypothesis import reject
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import DrawFn

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.case.layout import Layout
from strategies._drawing import eager
from strategies._validation import check_int
from strategies.aliasing import ALIAS_KINDS, aliasing
from strategies.cases import laid_out
from strategies.layouts import LAYOUT_FEATURES, check_layout_features, layouts
from strategies.shapes import shapes as shape_strategy
from strategies.values import sampling_interval, values

__all__ = ["tensors", "aliased"]

_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def _check(
    dtype: torch.dtype,
    layout_features: Sequence[str],
    domain: tuple[float | None, float | None],
    max_side: int,
) -> tuple[float, float]:
    if dtype not in _DTYPES:
        raise InvalidArgument(f"dtype={dtype!r} must be one of {_DTYPES}")
    check_layout_features(layout_features)
    check_int(max_side, "max_side", min_value=0)
    if not (isinstance(domain, tuple) and len(domain) == 2):
        raise InvalidArgument(f"domain={domain!r} must be a pair (low, high); None leaves an end open")
    low, high = domain
    if low is not None and high is not None and not low < high:
        raise InvalidArgument(f"domain={domain!r} needs low < high")
    return sampling_interval(domain)


def _materialize(args: tuple[Arg, ...], dtype: torch.dtype) -> list[torch.Tensor]:
    case = Case("strategies.tensors", args, str(dtype).removeprefix("torch."))
    return case.materialize(requires_grad=False).args


def tensors(
    shape: Sequence[int] | None = None,
    *,
    dtype: torch.dtype = torch.float64,
    layout_features: Sequence[str] = LAYOUT_FEATURES,
    domain: tuple[float | None, float | None] = (None, None),
    specials: bool = False,
    max_rank: int = 4,
    max_side: int = 4,
) -> st.SearchStrategy[torch.Tensor]:
    """Tensors of ``shape`` (default: drawn, rank up to ``max_rank``, sides
    0..``max_side``) and ``dtype`` on the CPU, values in ``domain`` (open ends
    None), in a drawn layout with any of ``layout_features`` (``()``:
    contiguous only). ``specials`` adds a few ±0, tiny, subnormal and huge
    values. Shrinks toward a small contiguous tensor of plain values."""
    low, high = _check(dtype, layout_features, domain, max_side)
    check_int(max_rank, "max_rank", min_value=0)
    if shape is not None:
        shape = tuple(shape)
        for n in shape:
            check_int(n, "a size in shape", min_value=0)
    shapes = st.just(shape) if shape is not None else shape_strategy(max_rank=max_rank, max_side=max_side)
    value_strategy = values(low=low, high=high, specials=specials)
    features = tuple(layout_features)

    @st.composite
    def draw(draw_: DrawFn) -> torch.Tensor:
        size = draw_(shapes)
        layout = draw_(layouts(size, features=features)) if features else Layout.contiguous(size)
        arg = laid_out(size, draw_(value_strategy), None if layout.is_contiguous(size) else layout)
        return _materialize((arg,), dtype)[0]

    return eager(draw())


def aliased(
    *shapes: Sequence[int],
    dtype: torch.dtype = torch.float64,
    kinds: Sequence[str] = ALIAS_KINDS,
    domain: tuple[float | None, float | None] = (None, None),
    layout_features: Sequence[str] = LAYOUT_FEATURES,
) -> st.SearchStrategy[tuple[torch.Tensor, ...]]:
    """One tensor per shape in ``shapes`` (at least two), at least two of them
    sharing memory: the same tensor (``"same"``: needs equal shapes), or
    overlapping or disjoint views of one storage. Shrinks toward the simplest
    aliasing that remains, contiguous and of plain values."""
    if len(shapes) < 2:
        raise InvalidArgument(f"aliased() needs at least two shapes, got {len(shapes)}")
    bad = set(kinds) - set(ALIAS_KINDS)
    if bad or not kinds:
        raise InvalidArgument(f"kinds={tuple(kinds)!r} must be a non-empty subset of {ALIAS_KINDS}")
    low, high = _check(dtype, layout_features, domain, 0)
    sizes = tuple(tuple(s) for s in shapes)
    for size in sizes:
        for n in size:
            check_int(n, "a size in shapes", min_value=0)
    if not any(math.prod(s) for s in sizes):
        raise InvalidArgument("aliased() needs a shape with at least one element")
    value_strategy = values(low=low, high=high)
    features = tuple(layout_features)

    @st.composite
    def draw(draw_: DrawFn) -> tuple[torch.Tensor, ...]:
        args = []
        for size in sizes:
            layout = draw_(layouts(size, features=features)) if features else Layout.contiguous(size)
            args.append(laid_out(size, draw_(value_strategy), None if layout.is_contiguous(size) else layout))
        shared = draw_(aliasing(args, [0] * len(args), kinds=kinds, views=False, require=True))
        if not any(a.alias is not None for a in shared):
            reject()  # no relation of ``kinds`` fits these shapes for this draw
        return tuple(_materialize(tuple(shared), dtype))

    return eager(draw())
