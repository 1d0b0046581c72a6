"""backend: the same call on another array backend gives the same outputs.

For targets whose ``fn`` can run its body on another backend
(``Target.cross_backend(name)``, e.g. tensorly's numpy backend): outputs on the
pytorch backend must match outputs on the numpy backend at the very same
values, passed as NumPy views of the same memory (so layouts reach NumPy
too). A mismatch must repeat; a float32 one must be farther from a float64
run than the other side is.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils._pytree import tree_leaves

from fuzzdiff.case.case import Case
from fuzzdiff.checks.check import Check, Cost, probe_params
from fuzzdiff.checks.twins import judge_twins
from fuzzdiff.paths.result import Result, outputs_and
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict

OTHER = "numpy"


def _floating(leaves) -> tuple[torch.Tensor, ...]:
    out = (torch.as_tensor(np.asarray(x)) if not isinstance(x, torch.Tensor) else x for x in leaves)
    return tuple(t.detach() for t in out if t.is_floating_point() or t.is_complex())


def on_torch(target: Target, case: Case, cast=None) -> Result:
    args = case.materialize(requires_grad=False, cast=cast).args
    return outputs_and(_floating(tree_leaves(target.fn(*args, **case.kwargs))), [])


def on_other(target: Target, case: Case, cast=None) -> Result:
    """numpy computes on the host; its results go back to the case's device
    so that the two sides compare there."""
    args = [a.cpu().numpy() for a in case.materialize(requires_grad=False, cast=cast).args]
    if target.cross_backend is None:
        raise TypeError(f"target {target.name!r} has no other backend (Target.cross_backend)")
    out = target.cross_backend(OTHER)(*args, **case.kwargs)
    return outputs_and([t.to(case.device) for t in _floating(tree_leaves(out))], [])


def run(target: Target, case: Case) -> Verdict:
    return judge_twins(
        f"pytorch backend vs {OTHER} backend",
        target,
        case,
        lambda c, cast=None: on_torch(target, c, cast),
        lambda c, cast=None: on_other(target, c, cast),
        check="backend",
    )


def applies(target: Target) -> str | None:
    if target.cross_backend is not None:
        return None
    return "the target has no other backend to compare with (Target.cross_backend)"


CHECK = Check("backend", run, params=probe_params(), applies=applies, needs_grad=False, cost=Cost(0.045, 0.0021))
