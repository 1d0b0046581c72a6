"""mutation: a functional target leaves its inputs as they were.

Every storage an argument lives in is snapshotted byte for byte, with each
argument's metadata (shape, strides, offset, dtype, requires_grad); forward
and backward run; nothing may have changed.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from fuzzdiff.case.case import Case
from fuzzdiff.case.directions import probes_like
from fuzzdiff.checks.check import Check, Cost, OpInfoRole, probe_params
from fuzzdiff.checks.fragment import Fragment, ScriptContext, lines
from fuzzdiff.paths.function import leaf_function
from fuzzdiff.paths.reverse import vjp
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict


def snapshot(t: torch.Tensor) -> tuple[tuple, torch.Tensor]:
    """A tensor's metadata, and a copy of every byte of its storage (a uint8 view
    of it, cloned: bytes() of a storage goes byte by byte through Python,
    milliseconds per kilobyte)."""
    meta = (tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.requires_grad)
    return meta, torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage()).clone()


def first_change(watched: Mapping[str, torch.Tensor], before: Mapping[str, tuple]) -> str | None:
    """The first watched tensor whose metadata or storage bytes differ from ``before``."""
    for name, t in watched.items():
        (meta, data), (now_meta, now_data) = before[name], snapshot(t)
        if now_meta != meta:
            return f"the metadata of {name}: {meta} -> {now_meta}"
        if not torch.equal(now_data, data):
            return f"the values in the storage of {name}"
    return None


def changes(call, args, leaves, watched: Mapping[str, torch.Tensor], cotangents) -> tuple[str, str | None]:
    """(stage, what changed or None): ``call(args)``'s forward, then its backward
    with ``cotangents(outputs)``, against snapshots of the watched tensors."""
    before = {name: snapshot(t) for name, t in watched.items()}
    outs = call(args)
    stage, what = "forward", first_change(watched, before)
    if what is None and any(o.requires_grad for o in outs):
        vjp(outs, leaves, cotangents(outs))
        stage, what = "backward", first_change(watched, before)
    return stage, what


def run(target: Target, case: Case) -> Verdict:
    f = leaf_function(target, case)
    watched = {
        **{f"argument {a.name}": t for a, t in zip(target.args, f.args)},
        **{f"leaf {k}": l for k, l in enumerate(f.leaves)},
    }
    stage, what = changes(f.call_args, f.args, f.leaves, watched, lambda o: probes_like(case.params, "cotangent", o))
    if what is not None:
        return Verdict("fail", f"{stage} changed {what}", {"changed": what, "stage": stage})
    return Verdict("pass")


def script(ctx: ScriptContext) -> Fragment:
    return Fragment(
        "a functional op leaves every input's storage bytes and metadata unchanged, through forward and backward",
        lines(
            "leaves = make_leaves()",
            "args = make_args(leaves)",
            "watched = {**{f'argument {n}': a for n, a in zip(ARG_NAMES, args)},",
            "           **{f'leaf {k}': l for k, l in enumerate(leaves)}}",
            "stage, what = changes(lambda args: outputs(call(*args)), args, leaves, watched, lambda outs: V)",
            'return finish([(what is None, f"{stage} changed {what}" if what else',
            '                "forward and backward leave every input unchanged")])',
        ),
        ("outputs", "finish"),
        ("V",),
        extra=ctx.wrt_constants(),
        copies=(changes,),
    )


def _functional(target: Target) -> str | None:
    return None if target.functional else "the target mutates its inputs by design"


CHECK = Check(
    "mutation",
    run,
    params=probe_params("cotangent"),
    applies=_functional,
    needs_grad=False,
    script=script,
    cost=Cost(0.012, 0.0020),
    opinfo=OpInfoRole(),
)
