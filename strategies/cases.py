"""Cases: everything above composed for one target's signature."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import SearchStrategy

from fuzzdiff.case import Arg, Case, Layout, Values
from fuzzdiff.targets.target import FromShapes, Index, Mask, Target
from strategies.aliasing import draw_aliasing
from strategies.dtypes import dtypes as dtype_strategy
from strategies.layouts import LAYOUT_FEATURES, draw_layout
from strategies.shapes import draw_spec_shapes
from strategies.values import draw_values, sampling_interval, values_plan

__all__ = ["cases", "case_plan", "draw_case", "draw_kwargs"]


def draw_kwargs(draw, target: Target, shapes) -> dict:
    """Resolve a target's keyword arguments: constants, strategies, or FromShapes."""
    out = {}
    for key, v in target.kwargs.items():
        if isinstance(v, FromShapes):
            v = v.fn(shapes)
        out[key] = draw(v) if isinstance(v, SearchStrategy) else v
    return out


def _arg_values(target: Target, name: str, shapes, specials: bool):
    """The value plan (strategies.values.value_plan) and dtype override of one argument."""
    kind = target.kinds.get(name)
    if isinstance(kind, Index):
        bound = _dim_size(target, shapes, kind.dim)
        return values_plan(low=0, high=max(bound - 1, 0), kind="int"), "int64"
    if isinstance(kind, Mask):
        return values_plan(kind="bool"), "bool"
    low, high = target.sample.get(name) or sampling_interval(target.domain.get(name, (None, None)))
    return values_plan(low=low, high=high, specials=target.specials if specials else False,
                    avoid=target.kinks, distinct=target.distinct), None


def _dim_size(target: Target, shapes, dim: str) -> int:
    for a in target.args:
        if any(d.variadic for d in a.dims):
            continue
        for k, d in enumerate(a.dims):
            if d.name == dim and not d.broadcast:
                return shapes[a.name][k]
    for a in target.args:  # after a variadic group, count from the end
        names = [d.name for d in a.dims]
        if dim in names:
            return shapes[a.name][names.index(dim) - len(names)]
    raise InvalidArgument(f"dim {dim!r} does not appear in spec {target.spec!r}")


def cases(target: Target, *, dtypes: Sequence[torch.dtype] | None = None,
          layout_features: Sequence[str] | None = LAYOUT_FEATURES, alias: bool = True,
          require_alias: bool = False, specials: bool = True, max_side: int | None = None,
          devices: Sequence[str] | None = None):
    """Cases for ``target``: shapes from its spec, then per argument values, a
    layout and (for functional targets) aliasing. Shrinks toward small,
    contiguous, unaliased float64 cases. With ``require_alias`` every case has
    at least one argument that is a view or shares memory with another.
    ``devices`` (default: cpu, and cuda when available and the target takes
    it) is drawn when several."""
    if not isinstance(target, Target):
        raise InvalidArgument(f"target must be a fuzzdiff Target, got {type(target).__name__}")
    allowed = tuple(dtypes) if dtypes is not None else target.dtypes
    if not set(allowed) <= set(target.dtypes):
        raise InvalidArgument(f"target {target.name!r} supports {target.dtypes}, not {allowed}")
    side = target.max_side if max_side is None else max_side
    features = tuple(layout_features or ())
    if not target.functional or target.distinct:
        # stride 0 repeats values: an error for a target that writes its inputs,
        # and ties (kinks) for one whose derivative needs distinct values
        features = tuple(f for f in features if f != "expanded")
    if devices is None:
        devices = tuple(d for d in target.devices if d == "cpu" or torch.cuda.is_available())
    elif not devices or not {torch.device(d).type for d in devices} <= set(target.devices):
        raise InvalidArgument(f"target {target.name!r} takes devices {target.devices}, not "
                              f"{tuple(devices)}" + (f" ({target.cpu_only})" if target.cpu_only else ""))
    plan = case_plan(target, allowed, features, side, alias, require_alias, specials) + (tuple(devices),)
    strategy = _draw_case(plan)
    strategy.plan = plan  # fuzzdiff.runner draws case and params in one composite
    return strategy


def case_plan(target: Target, allowed: tuple, features: tuple[str, ...], side: int,
              alias: bool, require_alias: bool, specials: bool) -> tuple:
    """Everything about a target's cases that does not depend on the draws,
    resolved once per strategy rather than once per example."""
    specs = []
    for spec in target.args:
        diff = target.differentiable(spec.name)
        kind = target.kinds.get(spec.name)
        # an Index's bound depends on the drawn shapes: its plan is made per draw
        vals = None if isinstance(kind, Index) else _arg_values(target, spec.name, {}, specials)
        group = ((target.domain.get(spec.name), target.sample.get(spec.name))
                 if diff and kind is None and alias and target.functional else None)
        specs.append((spec.name, vals, "leaf" if diff else "none", group))
    dtype = allowed[0] if len(allowed) == 1 else dtype_strategy(allowed)
    return (target, dtype, tuple(specs), features, side, alias and target.functional,
            require_alias, specials)


# Module level: st.composite inspects the function's source when it decorates,
# which costs milliseconds, so it must not run once per strategy.
@st.composite
def _draw_case(draw, plan: tuple) -> Case:
    return draw_case(draw, plan)


def laid_out(shape: tuple[int, ...], values: Values, layout: Layout | None, **fields) -> Arg:
    """An argument in ``layout``: along a stride-0 dim its values repeat, as
    the memory they are read from does."""
    if layout is not None and 0 in layout.strides:
        values = replace(values, constant=tuple(d for d, s in enumerate(layout.strides) if s == 0))
    return Arg(shape, values, layout, **fields)


def draw_case(draw, plan: tuple) -> Case:
    """The draws of ``cases(...)`` made with a caller's ``draw``, for a
    ``case_plan``: fuzzdiff.runner draws a case and the check's params in one
    composite, since every nested strategy draw costs time of its own."""
    target, dtype, specs, features, side, alias, require_alias, specials, *devices = plan
    devices = devices[0] if devices else ("cpu",)
    device = devices[0] if len(devices) == 1 else draw(st.sampled_from(devices))
    if not isinstance(dtype, torch.dtype):
        dtype = draw(dtype)
    shapes = draw_spec_shapes(draw, target.args, target.min_side, side)
    args, groups = [], []
    for name, vals, grad, group in specs:
        shape = shapes[name]
        if vals is None:
            vals = _arg_values(target, name, shapes, specials)
        plan_values, arg_dtype = vals
        lay = draw_layout(draw, shape, features) if features else None
        args.append(laid_out(shape, draw_values(draw, plan_values), lay, grad=grad, dtype=arg_dtype))
        groups.append(group)
    if alias:
        args = list(draw_aliasing(draw, tuple(args), tuple(groups), require=require_alias))
    return Case(target.ref, tuple(args), str(dtype).removeprefix("torch."), device,
                kwargs=draw_kwargs(draw, target, shapes))
