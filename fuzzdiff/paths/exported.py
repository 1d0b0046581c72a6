"""torch.export: the target exported as a graph, run as a module, and differentiated.

A side (``case.params``):

- ``strict``: dynamo traces the target (True) or Python runs it on fake
  tensors (False, export's default);
- ``decomposed``: the exported program as traced (functional ATen), or after
  ``run_decompositions()`` (the core ATen opset backends consume): there an
  op's values and derivative are its decomposition's.

Every dim that the target's spec leaves free (a named or anonymous size,
not a number) is exported dynamic (``Dim.AUTO``: export infers which are
equal, and specializes a size the trace needs to be one value), so that the
trace is the symbolic-shape one users deploy. The exported module is called
at the example itself and differentiated by eager autograd: the graph's ATen
ops keep their own derivatives.

Exports are cached by the target, its kwargs, the variant and the case's
structure (shapes, layouts, dtype): a rerun of one case exports nothing.
``exported_module`` is torch-only: the check's scripts copy it by source.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import torch

from fuzzdiff.case.case import Case
from fuzzdiff.case.spec import ArgSpec
from fuzzdiff.guards.partial_graph import partial_graph_kept
from fuzzdiff.paths.compiled import structure
from fuzzdiff.targets.target import Target

__all__ = ["Exported", "dynamic_dims", "exported", "exported_module"]


class Exported(torch.nn.Module):
    """A function as the module torch.export needs, its keyword arguments closed over."""

    def __init__(self, fn, kwargs):
        super().__init__()
        self.fn = fn
        self.kwargs = kwargs

    def forward(self, *args):
        return self.fn(*args, **self.kwargs)


def exported_module(fn, kwargs, args, dynamic, strict, decomposed):
    """``fn`` exported at ``args`` (the dims in ``dynamic[i]`` of argument i
    dynamic), decomposed to the core ATen opset if ``decomposed``, as a module."""
    shapes = {"args": tuple({d: torch.export.Dim.AUTO for d in dims} or None for dims in dynamic)}
    program = torch.export.export(Exported(fn, kwargs), tuple(args), dynamic_shapes=shapes, strict=strict)
    if decomposed:
        program = program.run_decompositions()
    return program.module()


def dynamic_dims(specs: Sequence[ArgSpec], shapes: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """Per argument, the dims its spec leaves free: all but those given as numbers
    (a variadic group stands for the dims the fixed ones leave)."""
    out = []
    for spec, shape in zip(specs, shapes):
        dims: list[int] = []
        k = 0
        for dim in spec.dims:
            width = len(shape) - (len(spec.dims) - 1) if dim.variadic else 1
            if dim.kind != "fixed":
                dims.extend(range(k, k + width))
            k += width
        out.append(tuple(dims))
    return out


_CACHE: dict[tuple, Callable] = {}


def exported(
    target: Target, case: Case, args: Sequence[torch.Tensor], cast: torch.dtype | None, strict: bool, decomposed: bool
) -> Callable:
    """The target at the case's kwargs, exported at ``args`` (cached)."""
    kwargs = json.dumps(case.kwargs, sort_keys=True, default=repr)
    key = (target.ref, id(target.fn), kwargs, structure(case), str(cast), strict, decomposed)
    fn = _CACHE.get(key)
    if fn is None:
        dynamic = dynamic_dims(target.args, [a.shape for a in args])
        with partial_graph_kept():  # torch prints a failed export's graph to stderr
            fn = _CACHE[key] = exported_module(target.fn, dict(case.kwargs), args, dynamic, strict, decomposed)
    return fn
