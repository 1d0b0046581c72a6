"""Cases: everything above composed for one target's signature."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import DrawFn, SearchStrategy

from fuzzdiff.case.arguments import ArgKind, FromShapes, Index, Mask
from fuzzdiff.case.case import Arg, Case
from fuzzdiff.case.layout import Layout
from fuzzdiff.case.spec import ArgSpec
from fuzzdiff.case.structures import MATRIX_STRUCTURES
from fuzzdiff.case.values import Values
from strategies._drawing import planned
from strategies.aliasing import draw_aliasing
from strategies.dtypes import dtypes as dtype_strategy
from strategies.layouts import LAYOUT_FEATURES, check_layout_class, draw_layout
from strategies.shapes import draw_spec_shapes
from strategies.values import ValuesPlan, draw_values, sampling_interval, values_plan

__all__ = ["cases", "case_plan", "CasePlan", "ArgPlan", "Signature", "draw_case", "draw_kwargs"]


@runtime_checkable
class Signature(Protocol):
    """What ``cases()`` reads of a target: its arguments and where their values
    may lie. ``fuzzdiff.targets.target.Target`` is one; strategies never import
    the targets. Every member is read-only (properties): a frozen dataclass's
    fields satisfy them."""

    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> str: ...

    @property
    def domain(self) -> Mapping[str, tuple[float | None, float | None]]: ...

    @property
    def sample(self) -> Mapping[str, tuple[float, float]]: ...

    @property
    def dtypes(self) -> tuple[torch.dtype, ...]: ...

    @property
    def kinds(self) -> Mapping[str, ArgKind]: ...

    @property
    def kwargs(self) -> Mapping[str, Any]: ...

    @property
    def kinks(self) -> tuple[float, ...]: ...

    @property
    def distinct(self) -> bool: ...

    @property
    def functional(self) -> bool: ...

    @property
    def specials(self) -> bool | tuple[str, ...]: ...

    @property
    def structured(self) -> tuple[str, ...]: ...

    @property
    def min_side(self) -> int: ...

    @property
    def max_side(self) -> int: ...

    @property
    def cpu_only(self) -> str | None: ...

    @property
    def args(self) -> tuple[ArgSpec, ...]: ...

    @property
    def devices(self) -> tuple[str, ...]: ...

    @property
    def ref(self) -> str: ...

    def differentiable(self, arg: str) -> bool: ...


@dataclass(frozen=True)
class ArgPlan:
    """One argument's part of a CasePlan. ``values`` is None for an Index,
    whose bound depends on the drawn shapes (its plan is made per draw)."""

    name: str
    values: tuple[ValuesPlan, str | None] | None
    grad: str
    alias_group: tuple[Any, ...] | None


@dataclass(frozen=True)
class CasePlan:
    """Everything about a target's cases that does not depend on the draws,
    resolved (and validated) once per strategy rather than once per example."""

    target: Signature
    dtype: torch.dtype | SearchStrategy[torch.dtype]
    args: tuple[ArgPlan, ...]
    layout_features: tuple[str, ...]
    max_side: int
    alias: bool
    require_alias: bool
    specials: bool
    devices: tuple[str, ...]
    structured: bool = True
    layout_class: str | None = None
    min_side: int | None = None  # None: the target's


def draw_kwargs(draw: DrawFn, target: Signature, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Any]:
    """Resolve a target's keyword arguments: constants, strategies, or FromShapes."""
    out = {}
    for key, v in target.kwargs.items():
        if isinstance(v, FromShapes):
            v = v.fn(shapes)
        out[key] = draw(v) if isinstance(v, SearchStrategy) else v
    return out


def _arg_values(
    target: Signature, name: str, shapes: Mapping[str, tuple[int, ...]], specials: bool, structured: bool = True
) -> tuple[ValuesPlan, str | None]:
    """The values plan and dtype override of one argument."""
    kind = target.kinds.get(name)
    if isinstance(kind, Index):
        bound = _dim_size(target, shapes, kind.dim)
        return values_plan(low=0, high=max(bound - 1, 0), kind="int"), "int64"
    if isinstance(kind, Mask):
        return values_plan(kind="bool"), "bool"
    low, high = target.sample.get(name) or sampling_interval(target.domain.get(name, (None, None)))
    return values_plan(
        low=low,
        high=high,
        specials=target.specials if specials else False,
        avoid=target.kinks,
        distinct=target.distinct,
        structures=_fitting(target.structured, target, name) if structured else (),
    ), None


def _fitting(structures: tuple[str, ...], target: Signature, name: str) -> tuple[str, ...]:
    """The structured points an argument can be at: a matrix's only where its
    spec ends in two dims (a vector is never the identity)."""
    if not structures or not set(structures) & set(MATRIX_STRUCTURES):
        return structures
    arg = next(a for a in target.args if a.name == name)
    if sum(1 for d in arg.dims[-2:] if not d.variadic) == 2:
        return structures
    return tuple(s for s in structures if s not in MATRIX_STRUCTURES)


def _dim_size(target: Signature, shapes: Mapping[str, tuple[int, ...]], dim: str) -> int:
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


def case_plan(
    target: Signature,
    *,
    dtypes: Sequence[torch.dtype] | None = None,
    layout_features: Sequence[str] | None = LAYOUT_FEATURES,
    alias: bool = True,
    require_alias: bool = False,
    specials: bool = True,
    max_side: int | None = None,
    devices: Sequence[str] | None = None,
    structured: bool = True,
    layout_class: str | None = None,
    min_side: int | None = None,
) -> CasePlan:
    """The arguments of ``cases(...)``, declared once here: validated and
    resolved into the ``CasePlan`` that ``draw_case`` draws from with a
    caller's ``draw`` (fuzzdiff.search.runner draws a case and a check's params in
    one composite)."""
    if not isinstance(target, Signature):
        raise InvalidArgument(f"target must be a fuzzdiff Target, got {type(target).__name__}")
    allowed = tuple(dtypes) if dtypes is not None else target.dtypes
    if not set(allowed) <= set(target.dtypes):
        raise InvalidArgument(f"target {target.name!r} supports {target.dtypes}, not {allowed}")
    side = target.max_side if max_side is None else max_side
    check_layout_class(layout_class)
    if min_side is not None and (not isinstance(min_side, int) or min_side < 0):
        raise InvalidArgument(f"min_side must be an integer >= 0, got {min_side!r}")
    features = tuple(layout_features or ())
    if not target.functional or target.distinct:
        # stride 0 repeats values: an error for a target that writes its inputs,
        # and ties (kinks) for one whose derivative needs distinct values
        features = tuple(f for f in features if f != "expanded")
    if devices is None:
        devices = tuple(d for d in target.devices if d == "cpu" or torch.cuda.is_available())
    elif not devices or not {torch.device(d).type for d in devices} <= set(target.devices):
        raise InvalidArgument(
            f"target {target.name!r} takes devices {target.devices}, not "
            f"{tuple(devices)}" + (f" ({target.cpu_only})" if target.cpu_only else "")
        )
    args = []
    for spec in target.args:
        diff = target.differentiable(spec.name)
        kind = target.kinds.get(spec.name)
        vals = None if isinstance(kind, Index) else _arg_values(target, spec.name, {}, specials, structured)
        group = (
            (target.domain.get(spec.name), target.sample.get(spec.name))
            if diff and kind is None and alias and target.functional
            else None
        )
        args.append(ArgPlan(spec.name, vals, "leaf" if diff else "none", group))
    dtype = allowed[0] if len(allowed) == 1 else dtype_strategy(allowed)
    return CasePlan(
        target,
        dtype,
        tuple(args),
        features,
        side,
        alias and target.functional,
        require_alias,
        specials,
        tuple(devices),
        structured,
        layout_class,
        None if min_side is None else min(max(min_side, target.min_side), side),
    )


@planned(case_plan)
def cases(plan: CasePlan) -> SearchStrategy[Case]:
    """Cases for ``target``: shapes from its spec, then per argument values, a
    layout and (for functional targets) aliasing. Shrinks toward small,
    contiguous, unaliased float64 cases without specials or structure. With
    ``require_alias`` every case has at least one argument that is a view or
    shares memory with another. ``devices`` (default: cpu, and cuda when
    available and the target takes it) is drawn when several.
    ``specials`` and ``structured`` turn off the special values and
    structured points the target opts into (``specials``, ``structured``).
    ``layout_class`` (one of strategies.layouts.LAYOUT_CLASSES) forces that
    class on every argument it applies to; ``min_side`` raises the least size
    of a dim the spec does not bound (a layout shows on sides of 2 and more).
    The arguments are ``case_plan``'s."""
    return _draw_case(plan)


# Module level: st.composite inspects the function's source when it decorates,
# which costs milliseconds, so it must not run once per strategy.
@st.composite
def _draw_case(draw: DrawFn, plan: CasePlan) -> Case:
    return draw_case(draw, plan)


def laid_out(shape: tuple[int, ...], values: Values, layout: Layout | None, **fields: Any) -> Arg:
    """An argument in ``layout``: along a stride-0 dim its values repeat, as
    the memory they are read from does (so a matrix whose rows or columns
    repeat is not at a matrix's structured point: those are dropped)."""
    if layout is not None and 0 in layout.strides:
        constant = tuple(d for d, s in enumerate(layout.strides) if s == 0)
        structure = values.structure
        if any(d >= len(shape) - 2 and shape[d] > 1 for d in constant):
            structure = tuple((name, k) for name, k in structure if name not in MATRIX_STRUCTURES)
        values = replace(values, constant=constant, structure=structure)
    return Arg(shape, values, layout, **fields)


def draw_case(draw: DrawFn, plan: CasePlan) -> Case:
    """The draws of ``cases(...)`` made with a caller's ``draw``, for a
    ``case_plan``: every nested strategy draw costs time of its own."""
    target = plan.target
    device = plan.devices[0] if len(plan.devices) == 1 else draw(st.sampled_from(plan.devices))
    dtype = plan.dtype if isinstance(plan.dtype, torch.dtype) else draw(plan.dtype)
    min_side = target.min_side if plan.min_side is None else plan.min_side
    shapes = draw_spec_shapes(draw, target.args, min_side, plan.max_side)
    args, groups = [], []
    for arg in plan.args:
        shape = shapes[arg.name]
        values, arg_dtype = arg.values or _arg_values(target, arg.name, shapes, plan.specials, plan.structured)
        lay = draw_layout(draw, shape, plan.layout_features, force=plan.layout_class) if plan.layout_features else None
        args.append(laid_out(shape, draw_values(draw, values), lay, grad=arg.grad, dtype=arg_dtype))
        groups.append(arg.alias_group)
    if plan.alias:
        args = list(draw_aliasing(draw, tuple(args), tuple(groups), require=plan.require_alias))
    return Case(
        target.ref, tuple(args), str(dtype).removeprefix("torch."), device, kwargs=draw_kwargs(draw, target, shapes)
    )
