"""The input features of a case: what a campaign counts as reaching new ground.

A feature is a coarse fact about a drawn structure that bugs are known to
hinge on (a stride-0 argument, a permuted one, a storage offset, aliasing,
an empty or size-1 dim, a 0-dim tensor, the dtype, a structured point such
as ``structure:zeros``). A pair whose cases reach
a feature for the first time earns a higher score in the campaign's later
rounds (fuzzdiff.campaign.schedule).
"""

from __future__ import annotations

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.case.layout import Layout

__all__ = ["case_features", "arg_features", "relaid"]


def relaid(case: Case) -> Case:
    """The layout check's other run of ``case``: the same values in the
    layouts drawn into ``params["layouts"]`` (one per argument)."""
    return case.with_layouts(
        [Layout(d["storage_size"], tuple(d["strides"]), d["offset"]) for d in case.params["layouts"]]
    )


def case_features(case: Case) -> frozenset[str]:
    found = {f"dtype:{case.dtype}", f"device:{case.device.split(':')[0]}"}
    for arg in case.args:
        found |= arg_features(arg)
    return frozenset(found)


def arg_features(arg: Arg) -> frozenset[str]:
    """The features of one argument (a known discrepancy may hinge on which)."""
    found = set()
    shape = arg.shape
    if not shape:
        found.add("rank0")
    if 0 in shape:
        found.add("empty")
    if 1 in shape:
        found.add("size1")
    if arg.alias is not None:
        found.add(f"alias:{arg.alias.kind}")
    if arg.grad == "view":
        found.add("nonleaf-view")
    found.update(f"structure:{name}" for name, _ in arg.values.structure)
    layout = arg.layout
    if layout is None or layout.is_contiguous(shape):
        found.add("contiguous")
        return frozenset(found)
    strides = [s for n, s in zip(shape, layout.strides) if n > 1]
    if any(s == 0 for s in strides):
        found.add("stride0")
        found.update(
            f"stride0:{end}"
            for end, d in (("first", 0), ("last", len(shape) - 1))
            if shape[d] > 1 and layout.strides[d] == 0
        )
    if layout.offset:
        found.add("offset")
    if any(a < b for a, b in zip(strides, strides[1:])):
        found.add("permuted")
        n, c, h, w = layout.strides if len(shape) == 4 else (0, 0, 0, 0)
        if len(shape) == 4 and shape[1] > 1 and 0 < c < w <= h <= n:  # channels innermost: NHWC order
            found.add("channels_last")
    else:
        found.add("gapped")
    if _gapped(shape, layout.strides):
        found.add("sliced")
    return frozenset(found)


def _gapped(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Some dim steps over elements: in the order of its strides, a stride
    larger than the extent of the dims inside it."""
    extent = 1
    for n, s in sorted(((n, s) for n, s in zip(shape, strides) if n > 1 and s > 0), key=lambda p: p[1]):
        if s > extent:
            return True
        extent = s * n
    return False
