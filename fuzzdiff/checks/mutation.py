"""mutation: a functional target leaves its inputs as they were.

Every storage an argument lives in is snapshotted byte for byte, with each
argument's metadata (shape, strides, offset, dtype, requires_grad); forward
and backward run; nothing may have changed.
"""

from __future__ import annotations

import torch

from fuzzdiff.case import Case
from fuzzdiff.checks.check import Check, probe_params
from fuzzdiff.directions import probes_like
from fuzzdiff.paths.function import leaf_function
from fuzzdiff.paths.reverse import vjp
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict


def metadata(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.requires_grad)


def storage_bytes(t: torch.Tensor) -> torch.Tensor:
    """A copy of every byte of ``t``'s storage (a uint8 view of it, cloned: bytes()
    of a storage goes byte by byte through Python, milliseconds per kilobyte)."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage()).clone()


def run(target: Target, case: Case) -> Verdict:
    f = leaf_function(target, case)
    tensors = [*f.args, *f.leaves]
    before_meta = [metadata(t) for t in tensors]
    before = [storage_bytes(t) for t in tensors]
    outs = f.call_args(f.args)
    stage = "forward"
    changed = _changes(tensors, before_meta, before)
    if not changed and any(o.requires_grad for o in outs):
        vjp(outs, f.leaves, probes_like(case.params, "cotangent", outs))
        stage = "backward"
        changed = _changes(tensors, before_meta, before)
    if changed:
        return Verdict("fail", f"{stage} changed {changed}", {"changed": changed, "stage": stage})
    return Verdict("pass")


def _changes(tensors, before_meta, before) -> str | None:
    n_args = len(tensors)
    for k, (t, meta, data) in enumerate(zip(tensors, before_meta, before)):
        name = f"tensor {k} of {n_args}"
        if metadata(t) != meta:
            return f"the metadata of {name}: {meta} -> {metadata(t)}"
        if not torch.equal(storage_bytes(t), data):
            return f"the values in the storage of {name}"
    return None


def _functional(target: Target) -> str | None:
    return None if target.functional else "the target mutates its inputs by design"


CHECK = Check("mutation", run, params=probe_params("cotangent"), applies=_functional, needs_grad=False)
