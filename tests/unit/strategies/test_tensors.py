"""strategies.tensors / aliased: real tensors, every layout property really produced."""

import pytest
import torch
from hypothesis import HealthCheck, find, given, settings
from hypothesis.errors import InvalidArgument

from strategies import aliased, tensors

# derandomized: how far a search shrinks must not depend on the run
FIND = settings(max_examples=2000, database=None, derandomize=True, suppress_health_check=list(HealthCheck))


def _find(strategy, condition):
    return find(strategy, condition, settings=FIND)


def test_each_layout_property_is_drawn():
    nonempty = lambda t: t.numel() > 1  # noqa: E731
    assert not _find(tensors(), lambda t: nonempty(t) and not t.is_contiguous()).is_contiguous()
    assert _find(tensors(), lambda t: t.storage_offset() > 0).storage_offset() > 0
    expanded = _find(tensors(), lambda t: any(s == 0 and n > 1 for n, s in zip(t.shape, t.stride())))
    assert 0 in expanded.stride()
    channels_last = _find(tensors(shape=(2, 3, 2, 2)),
                          lambda t: t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous())
    assert channels_last.stride()[1] == 1


def test_shrinks_to_the_plainest_tensor():
    plain = _find(tensors(), lambda t: True)
    assert plain.shape == () and plain.is_contiguous() and plain.storage_offset() == 0
    noncontiguous = _find(tensors(), lambda t: t.dim() >= 2 and not t.is_contiguous())
    assert noncontiguous.dim() == 2 and noncontiguous.numel() <= 4  # the smallest shape that can be


@settings(max_examples=60, database=None, deadline=None)
@given(tensors(shape=(3, 2), dtype=torch.float32, domain=(0.5, 3.0), layout_features=()))
def test_shape_dtype_domain_and_contiguous_only(t):
    assert t.shape == (3, 2) and t.dtype == torch.float32 and t.is_contiguous()
    assert bool(((t >= 0.5) & (t <= 3.0)).all())


def test_aliased_tensors_share_memory_each_kind():
    def shared(ts):
        a, b = ts
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()

    same = _find(aliased((2, 3), (2, 3), kinds=("same",)), lambda ts: True)
    assert same[0] is same[1]
    overlap = _find(aliased((3,), (2,), kinds=("overlap",)), lambda ts: True)
    assert shared(overlap)
    disjoint = _find(aliased((2,), (2,), kinds=("disjoint",)), lambda ts: True)
    assert shared(disjoint) and disjoint[0] is not disjoint[1]


@pytest.mark.parametrize("call, message", [
    (lambda: tensors(dtype=torch.int64), "dtype"),
    (lambda: tensors(layout_features=("diagonal",)), "unknown layout features"),
    (lambda: tensors(domain=(1.0, 0.0)), "low < high"),
    (lambda: tensors(shape=(2, -1)), "size in shape"),
    (lambda: aliased((2,)), "at least two shapes"),
    (lambda: aliased((2,), (2,), kinds=("twice",)), "kinds"),
])
def test_bad_arguments_name_what_is_wrong(call, message):
    with pytest.raises(InvalidArgument, match=message):
        call()
