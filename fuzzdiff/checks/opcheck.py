"""opcheck: torch.library's own consistency tests, at every fuzzed input.

``torch.library.opcheck`` tests a custom op's schema, autograd registration,
fake (meta) kernel and AOT dispatch, but only at the samples its author
wrote, which are mostly contiguous. Here it runs at noncontiguous, offset,
stride-0 and aliased inputs, where a fake kernel that guesses strides or a
kernel that writes into an input it declared read-only gives itself away.
Whether the registered backward is right is the ``grad`` check's question.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import torch
from hypothesis import strategies as st
from torch._library.custom_ops import CustomOpDef

from fuzzdiff.case.case import Case
from fuzzdiff.checks.check import Check, Cost
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict

UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
_PARAMS: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries({})


def custom_op(fn) -> bool:
    """A torch.library op outside aten: a CustomOpDef, OpOverload or OpOverloadPacket."""
    if isinstance(fn, CustomOpDef):
        return True
    if isinstance(fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return fn.namespace not in ("aten", "prim", "prims")
    return False


def _applies(target: Target) -> str | None:
    return None if custom_op(target.fn) else "not a torch.library custom op"


def structure(case: Case) -> str:
    """The case without its values: what opcheck's verdict depends on."""
    bare = replace(
        case, args=tuple(replace(a, values=replace(a.values, seed=0, nudge_seed=0)) for a in case.args), params={}
    )
    return json.dumps(bare.to_json(), sort_keys=True)


_PASSED: set[tuple[int, str]] = set()  # (id of the op, structure) that passed: values do not matter


def run(target: Target, case: Case) -> Verdict:
    key = (id(target.fn), structure(case))
    if key in _PASSED:
        return Verdict("pass", "the same structure passed")
    inputs = case.materialize(requires_grad=True)
    # Detached views keep their strides, offsets and shared storages; opcheck
    # copies its inputs, which a non-leaf view does not allow.
    args = [a.detach().requires_grad_(a.requires_grad) for a in inputs.args]
    op = target.fn
    assert isinstance(op, (CustomOpDef, torch._ops.OpOverload, torch._ops.OpOverloadPacket))  # as _applies saw
    torch.library.opcheck(op, tuple(args), dict(case.kwargs), test_utils=UTILS)
    _PASSED.add(key)  # failures are never cached: a repeat must run them again
    return Verdict("pass")


CHECK = Check("opcheck", run, params=lambda target, case: _PARAMS, applies=_applies, cost=Cost(0.93, 0.045))
