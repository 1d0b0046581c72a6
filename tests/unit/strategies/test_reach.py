"""The strategies reach every memory feature they claim, seen on the MATERIALIZED tensors.

Each test asks ``hypothesis.find`` for a case whose real tensors (strides,
storage offset, storage pointer, autograd leaf-ness) show one feature; a strategy
that silently stopped producing it makes ``find`` raise NoSuchExample.
"""

from __future__ import annotations

import torch
from tests.unit.fdhelpers import MATRIX, PAIR, TRIPLE, UNARY, UNARY4, offsets, overlap, reach, storage_ptr
from hypothesis import given
from hypothesis import strategies as st

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.case.values import Values
from strategies import cases, layouts, shapes, values


def first_arg(case: Case) -> torch.Tensor:
    return case.materialize().args[0]


@st.composite
def one_arg_cases(draw, min_rank=0, max_rank=4, min_side=0, max_side=4):
    """A one-argument case built from shapes() and layouts() directly."""
    shape = draw(shapes(min_rank=min_rank, max_rank=max_rank, min_side=min_side, max_side=max_side))
    lay = draw(layouts(shape, features=("permuted", "sliced", "offset", "channels_last")))
    return Case("unit", (Arg(shape, draw(values()), lay),))


# -- layouts ------------------------------------------------------------------------

def test_reaches_noncontiguous_layout():
    case = reach(cases(UNARY), lambda c: not first_arg(c).is_contiguous())
    t = first_arg(case)
    assert not t.is_contiguous()
    assert t.numel() > 1


def test_reaches_noncontiguous_layout_from_layouts_strategy():
    case = reach(one_arg_cases(), lambda c: not first_arg(c).is_contiguous())
    assert not first_arg(case).is_contiguous()


def test_reaches_storage_offset():
    case = reach(cases(UNARY), lambda c: first_arg(c).storage_offset() > 0)
    t = first_arg(case)
    assert t.storage_offset() > 0
    # the offset is real: the elements do not start at the storage's first element
    assert min(offsets(t), default=t.storage_offset()) >= t.storage_offset() > 0


def test_reaches_stride_zero_expanded_dim():
    def expanded(c):
        t = first_arg(c)
        return any(s == 0 and n > 1 for n, s in zip(t.shape, t.stride()))

    case = reach(cases(MATRIX), expanded)
    t = first_arg(case)
    d = next(d for d, (n, s) in enumerate(zip(t.shape, t.stride())) if s == 0 and n > 1)
    # several logical elements share one memory location
    assert len(offsets(t)) < t.numel()
    assert torch.equal(t, t.narrow(d, 0, 1).expand_as(t))


def test_reaches_channels_last_for_4d():
    def channels_last(c):
        t = first_arg(c)
        return (t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)
                and not t.is_contiguous())

    case = reach(cases(UNARY4), channels_last)
    t = first_arg(case)
    assert t.dim() == 4
    assert t.is_contiguous(memory_format=torch.channels_last)
    assert not t.is_contiguous()
    assert t.stride()[1] == 1  # channels innermost


def test_channels_last_feature_alone_reaches_channels_last():
    # not via a random permutation: the channels_last feature by itself gets there
    s = st.tuples(st.integers(2, 3), st.integers(2, 3), st.integers(2, 3), st.integers(2, 3)).flatmap(
        lambda shape: layouts(shape, features=("channels_last",)).map(
            lambda lay: Case("unit", (Arg(shape, Values(), lay),))))
    case = reach(s, lambda c: first_arg(c).is_contiguous(memory_format=torch.channels_last)
                 and not first_arg(c).is_contiguous())
    assert first_arg(case).stride()[1] == 1


@given(st.data())
def test_channels_last_feature_alone_keeps_other_ranks_contiguous(data):
    # channels_last is a 4-D feature: for any other rank it must not permute anything
    shape = data.draw(shapes(min_rank=0, max_rank=5, min_side=1))
    lay = data.draw(layouts(shape, features=("channels_last",)))
    t = Case("unit", (Arg(shape, Values(), lay),)).materialize().args[0]
    if len(shape) == 4:
        assert t.is_contiguous() or t.is_contiguous(memory_format=torch.channels_last)
    else:
        assert t.is_contiguous()


# -- aliasing -----------------------------------------------------------------------

def test_reaches_overlapping_aliases():
    def overlapping(c):
        a, b = c.materialize().args
        return a is not b and overlap(a, b)

    case = reach(cases(PAIR, layout_features=None), overlapping)
    a, b = case.materialize().args
    assert a is not b
    assert storage_ptr(a) == storage_ptr(b)
    assert offsets(a) & offsets(b)
    assert case.args[1].alias is not None and case.args[1].alias.kind == "view"


def test_reaches_disjoint_views_of_one_storage():
    def disjoint(c):
        a, b = c.materialize().args
        return (a is not b and a.numel() > 0 and b.numel() > 0
                and storage_ptr(a) == storage_ptr(b) and not offsets(a) & offsets(b))

    case = reach(cases(PAIR, layout_features=None), disjoint)
    a, b = case.materialize().args
    assert storage_ptr(a) == storage_ptr(b)
    assert not offsets(a) & offsets(b)
    assert a.numel() and b.numel()


def test_reaches_same_tensor_twice():
    def same(c):
        args = c.materialize().args
        return args[1] is args[0]

    case = reach(cases(PAIR), same)
    args = case.materialize().args
    assert args[1] is args[0]
    assert case.args[1].alias is not None and case.args[1].alias.kind == "same"


def test_same_tensor_among_three_arguments():
    def same(c):
        a = c.materialize().args
        return a[2] is a[0] or a[2] is a[1]

    case = reach(cases(TRIPLE), same)
    args = case.materialize().args
    assert args[2] is args[0] or args[2] is args[1]


def test_reaches_nonleaf_view_whose_base_requires_grad():
    def nonleaf_view(c):
        t = first_arg(c)
        return (not t.is_leaf and t.requires_grad and t._base is not None
                and t._base.is_leaf and t._base.requires_grad)

    case = reach(cases(UNARY), nonleaf_view)
    inputs = case.materialize()
    t = inputs.args[0]
    assert not t.is_leaf and t.grad_fn is not None
    assert any(t._base is leaf for leaf in inputs.leaves)
    # the gradient flows back to the base through the view
    (g,) = torch.autograd.grad(t.sum(), [t._base], allow_unused=True)
    assert g is not None and g.shape == t._base.shape


def test_require_alias_always_aliases():
    s = cases(PAIR, require_alias=True)

    def unaliased(c):
        return not c.aliased

    from hypothesis.errors import NoSuchExample
    try:
        found = reach(s, unaliased, max_examples=300)
    except NoSuchExample:
        return
    raise AssertionError(f"require_alias=True produced an unaliased case: {found}")
