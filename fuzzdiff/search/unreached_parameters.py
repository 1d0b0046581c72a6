"""A module's parameters that the drawn ones never replace: checks of them say nothing.

A module is checked as a function of its parameters through
``torch.func.functional_call``, which swaps the registered Parameters for
the drawn ones. A module that reads its weights another way (a private dict
of its Parameter objects, a tensor cached at construction: ncps' LTC)
computes with its own, and every check of the drawn ones compares a zero
gradient with a zero gradient. Asked once, before the checks, by one call
and one backward at a drawn case: where no drawn parameter reaches the
outputs and the module's own do, the report says so.
"""

from __future__ import annotations

import torch
from torch.utils._pytree import tree_leaves

from fuzzdiff.search.random_calls import cases_in
from fuzzdiff.targets.recipe import ModuleFunction
from fuzzdiff.targets.target import Target

__all__ = ["unreached_parameters"]


def unreached_parameters(target: Target) -> str | None:
    """Why the checks of ``target``'s parameters say nothing, in words; None
    where the drawn parameters reach its outputs (or nothing is known: not a
    module, no parameter, a call that raises)."""
    fn = target.fn
    if not isinstance(fn, ModuleFunction) or not fn.parameters:
        return None
    own = dict(fn.module.named_parameters())
    dtype = next(iter(own.values())).dtype
    found = cases_in(target, dtype if dtype in target.dtypes else None)
    if not found:
        return None
    case = found[0]
    args = case.materialize(requires_grad=True).args
    drawn = args[len(args) - len(fn.parameters) :]
    mine = [own[name] for name in fn.parameters]
    try:
        outs = [o for o in tree_leaves(target(*args, **case.kwargs)) if isinstance(o, torch.Tensor) and o.requires_grad]
        if not outs:
            return None
        total = torch.stack([(o.real if o.is_complex() else o).sum().double() for o in outs]).sum()
        grads = torch.autograd.grad(total, [*drawn, *mine], allow_unused=True)
    except Exception:  # noqa: BLE001 - the checks report the call's errors at their own inputs
        return None
    if any(g is not None for g in grads[: len(drawn)]) or all(g is None for g in grads[len(drawn) :]):
        return None
    return (
        f"the module computes with its own parameters, not the drawn ones: no drawn parameter "
        f"({', '.join('p_' + n.replace('.', '_') for n in fn.parameters)}) reaches its outputs through "
        "torch.func.functional_call, while its registered Parameters do (it reads them another way, "
        "a dict or an attribute kept at construction), so the checks of its parameters say nothing"
    )
