"""A plain-torch stand-in for a user's function: evidence of whose bug a failure is.

When a failure also shows with the user's function replaced by a few lines
of torch of the same shape (the same arguments, in the same layouts, under
the same check parameters: backend, transform, in_dims), the user's code is
not what breaks, and the stand-in is the torch-only repro to file.

The stand-in is a dense linear map from every floating argument to every
floating output, through constant matrices captured at module level: linear,
so every derivative identity holds exactly and a finite-difference reference
is exact; captured constants, because closing over a tensor is what user code
does (``lambda x: x @ C``) and what some of torch's tracers get wrong.

Its code is written as text (``StandIn.source``) and executed to make the
function, so that the same code replays from a corpus record and prints in a
standalone script.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch.utils._pytree import tree_leaves

from fuzzdiff.case.case import Case
from fuzzdiff.targets.target import Target

__all__ = ["StandIn", "stand_in"]

SEED = 0x57A4D  # the constants' generator seed: the same stand-in in every process


@dataclass(frozen=True)
class StandIn:
    """The stand-in's target, and its code as a user target's stored source
    (imports, setup, definitions, call: fuzzdiff.targets.user.SOURCE_FIELDS)."""

    target: Target
    source: dict
    description: str


def stand_in(target: Target, case: Case) -> StandIn | None:
    """A stand-in of ``target`` at ``case``'s shapes, or None when the target
    has no floating output there (or cannot run there) to stand in for."""
    try:
        with torch.no_grad():
            out = target(*case.materialize(requires_grad=False).args, **case.kwargs)
    except Exception:  # noqa: BLE001 - nothing to stand in for where the target itself raises
        return None
    single = isinstance(out, torch.Tensor)
    outputs = [tuple(t.shape) for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    inputs = [
        (i, a) for i, a in enumerate(case.args) if (a.dtype or case.dtype).startswith(("float", "complex", "bfloat"))
    ]
    if not outputs or not inputs:
        return None
    names = [f"x{i}" for i in range(len(case.args))]
    setup = [f"generator = torch.Generator().manual_seed({SEED})"]
    terms: list[list[str]] = [[] for _ in outputs]
    for i, a in inputs:
        n = math.prod(a.shape)
        for j, shape in enumerate(outputs):
            setup.append(f"C{i}_{j} = torch.randn({n}, {math.prod(shape)}, dtype=torch.float64, generator=generator)")
            terms[j].append(f"x{i}.reshape(-1) @ C{i}_{j}.to(x{i})")
    results = [f"({' + '.join(t)}).reshape({_shape(shape)})" for t, shape in zip(terms, outputs)]
    if single and len(results) == 1:
        body = results[0]
    else:
        body = "(" + ", ".join(results) + ("," if len(results) == 1 else "") + ")"
    definition = f"def stand_in({', '.join(names)}, **kwargs):\n    return {body}\n"
    source = {"imports": ["import torch"], "setup": setup, "definitions": [definition], "call": "stand_in"}
    namespace: dict = {}
    exec("\n".join(["import torch", *setup, definition]), namespace)  # noqa: S102 - code written above
    fn = namespace["stand_in"]
    fn.fuzzdiff_source = source  # the script generator writes this source, as for a stored user function
    described = " + ".join(f"x{i} @ C{i}" for i, _ in inputs)
    return StandIn(
        replace(target, name=f"{target.name} (plain-torch stand-in)", fn=fn, origin=None, known=(), tolerances={}),
        source,
        f"the plain-torch stand-in {described} (a linear map through captured constants)",
    )


def _shape(shape: Sequence[int]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
