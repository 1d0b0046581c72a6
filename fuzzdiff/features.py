"""The input features of a case: what a campaign counts as reaching new ground.

A feature is a coarse fact about a drawn structure that bugs are known to
hinge on (a stride-0 argument, a permuted one, a storage offset, aliasing,
an empty or size-1 dim, a 0-dim tensor, the dtype, a structured point such
as ``structure:zeros``). A pair whose cases reach
a feature for the first time earns a higher score in the campaign's later
rounds (fuzzdiff.schedule).
"""

from __future__ import annotations

from fuzzdiff.case import Arg, Case, Layout

__all__ = ["case_features", "arg_features", "features_of_arg", "relaid"]


def relaid(case: Case) -> Case | None:
    """The case in the other memory layouts its check also runs it in
    (``params["layouts"]``, as the layout check draws them), if any."""
    other = case.params.get("layouts")
    if not other:
        return None
    return case.with_layouts([Layout(d["storage_size"], tuple(d["strides"]), d["offset"]) for d in other])


def case_features(case: Case) -> frozenset[str]:
    """The features of the case, and of the other layouts it runs in: a
    discrepancy between two layouts may lie on either side."""
    found = {f"dtype:{case.dtype}", f"device:{case.device.split(':')[0]}"}
    for i in range(len(case.args)):
        found |= features_of_arg(case, i)
    return frozenset(found)


def features_of_arg(case: Case, i: int) -> frozenset[str]:
    """Argument ``i``'s features, in the case's layout or in the other one it runs in."""
    found = arg_features(case.args[i])
    other = relaid(case)
    return found if other is None else found | arg_features(other.args[i])


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
        return frozenset(found)
    strides = [s for n, s in zip(shape, layout.strides) if n > 1]
    if any(s == 0 for s in strides):
        found.add("stride0")
    if layout.offset:
        found.add("offset")
    if any(a < b for a, b in zip(strides, strides[1:])):
        found.add("permuted")
    else:
        found.add("gapped")
    return frozenset(found)
