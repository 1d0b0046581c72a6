"""A Case: one fuzzed example, as plain data.

A case holds everything needed to rebuild the exact tensors of one example —
shapes, strides, storage offsets, aliasing, values, dtype — and nothing else, so
it can be written to JSON, shrunk by Hypothesis and replayed bit for bit later
without Hypothesis. Values are a seed plus a few special positions rather than
the elements themselves (``fuzzdiff.case.values``): cheap to draw, cheap to store,
deterministic to rebuild. Every random number (values, memory around views,
probes, nudges) comes from ``fuzzdiff.case.draws``, never from torch's generator, so
a case is a pure function of its JSON under any torch version.

Here: the case's data and its variants (other dtypes, layouts, seeds,
neighbouring points). Its tensors are built by ``fuzzdiff.case.materialize``, which
``Case`` inherits; its JSON is read back, field by field, by ``fuzzdiff.record.format``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from typing import Any, TypeVar

import numpy as np
import torch

from fuzzdiff.case.layout import Alias, CaseError, Layout
from fuzzdiff.case.materialize import Materialization
from fuzzdiff.case.structures import restored
from fuzzdiff.case.values import Values, numpy_tensor, tensor_array

__all__ = ["Arg", "Case", "DTYPES"]

DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.complex128,
        torch.complex64,
        torch.int64,
        torch.bool,
    )
}


_T = TypeVar("_T")


def _evolve(obj: _T, **changes: Any) -> _T:
    """``dataclasses.replace`` for the frozen, validation-free dataclasses here,
    without re-running ``__init__`` (several times faster). Everything in the
    instance's ``__dict__`` is carried over, cached properties included: only
    for changes that leave those valid."""
    new = object.__new__(type(obj))
    d = new.__dict__
    d.update(obj.__dict__)
    d.update(changes)
    return new


@dataclass(frozen=True)
class Arg:
    """One positional tensor argument.

    ``grad`` says what derivatives are taken with respect to: "leaf" (the tensor
    itself), "view" (its storage is the leaf and the argument a non-leaf view of
    it) or "none" (not differentiated: indices, masks, fixed targets).
    """

    shape: tuple[int, ...]
    values: Values = field(default_factory=Values)
    layout: Layout | None = None
    alias: Alias | None = None
    grad: str = "leaf"
    dtype: str | None = None  # overrides the case dtype (indices, masks)

    @property
    def strided(self) -> Layout:
        return self.layout or Layout.contiguous(self.shape)


@dataclass(frozen=True)
class Case(Materialization):
    target: str
    args: tuple[Arg, ...]
    dtype: str = "float64"
    device: str = "cpu"
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    # Argument index -> its filled storage, pinned exactly (a corpus record's
    # stored values). Anything that redraws the values or moves the layouts
    # drops it; nudged() moves the pinned values themselves.
    data: Mapping[int, torch.Tensor] = field(default_factory=dict, compare=False, repr=False)
    # Arguments the target gets as contiguous copies of themselves (``copied``).
    copies: tuple[int, ...] = ()

    @property
    def torch_dtype(self) -> torch.dtype:
        try:
            return DTYPES[self.dtype]
        except KeyError:
            raise CaseError(f"unknown dtype {self.dtype!r}; expected one of {sorted(DTYPES)}") from None

    def arg_dtype(self, i: int) -> torch.dtype:
        name = self.args[i].dtype
        return DTYPES[name] if name else self.torch_dtype

    def with_dtype(self, dtype: torch.dtype | str) -> Case:
        return replace(self, dtype=str(dtype).removeprefix("torch."), data={})

    @property
    def structured(self) -> bool:
        """Some argument's values sit at a structured point (fuzzdiff.case.structures)."""
        return any(a.values.structure for a in self.args)

    @property
    def repeated(self) -> bool:
        """Some argument is an earlier one passed again (alias "same"), or two
        are all zero: a tie between arguments that no move of the values
        keeping their structure breaks (``dist(x, x)``, ``dist(0, 0)``)."""
        zero = sum(any(name == "all_zero" for name, _ in a.values.structure) for a in self.args)
        return zero > 1 or any(a.alias is not None and a.alias.kind == "same" for a in self.args)

    @property
    def stride0(self) -> bool:
        """Some argument that neighbours move is laid out with stride 0 along a
        dim of size > 1, in a storage of its own: its layout repeats its
        values, and may have made the point singular (repeated rows make a
        rank-deficient matrix) where the values alone would not."""
        return bool(self._stride0_args())

    def _stride0_args(self) -> list[int]:
        shared = {self.owner(i) for i, a in enumerate(self.args) if a.alias is not None}
        return [
            i
            for i, a in enumerate(self.args)
            if a.alias is None
            and i not in shared
            and a.grad != "none"
            and a.values.kind == "float"
            and a.layout is not None
            and any(st == 0 and n > 1 for n, st in zip(a.shape, a.layout.strides))
        ]

    def copied(self) -> Case:
        """The case with each ``stride0`` argument passed to the target as a
        contiguous copy of itself: the same leaves, values and directions, each
        repeated value in memory of its own. A mismatch that vanishes here is
        the stride-0 layout's own."""
        return replace(self, copies=tuple(self._stride0_args()))

    def spread(self) -> Case:
        """The same values with each ``stride0`` argument laid out contiguously:
        every repeated value stored on its own (they still repeat), so that a
        neighbour (``nudged(..., keep_structure=False)``) can move each apart.
        Pinned values are copied out of the old layout."""
        args, data = list(self.args), dict(self.data)
        for i in self._stride0_args():
            a = args[i]
            args[i] = replace(a, layout=None)
            if i in data:
                lay = a.strided
                data[i] = data[i].as_strided(a.shape, lay.strides, lay.offset).contiguous().reshape(-1)
        return replace(self, args=tuple(args), data=data)

    def untied(self) -> Case:
        """Each argument that repeats a leaf argument (alias "same") made a leaf
        of its own with the same values: the tie is kept, the sharing is not."""
        args, data = list(self.args), dict(self.data)
        for i, a in enumerate(self.args):
            if a.alias is None or a.alias.kind != "same" or args[a.alias.of].alias is not None:
                continue
            args[i] = args[a.alias.of]
            if a.alias.of in data:
                data[i] = data[a.alias.of].clone()
        return replace(self, args=tuple(args), data=data)

    def nudged(self, amount: float, seed: int, keep_structure: bool = True) -> Case:
        """A neighbouring point: every floating value of a differentiable
        argument moved by at most ``amount`` of its range; structured values
        stay structured (the ties still tie, the zeros are still zeros), and
        so do values that repeat along a ``Values.constant`` dim, unless
        ``keep_structure`` is False: then each of those moves on its own
        (where the layout stores each: ``spread``), and a repeated argument
        (``repeated``) becomes its own leaf too, and stays where it is while
        the argument it repeats moves (two moves could coincide: a step is
        clipped to the amount).

        Pinned values (a record's) are moved themselves and stay pinned, so
        the neighbour is near the values the record holds, not near a redraw."""
        case, still = self, set()
        if not keep_structure and self.repeated:
            case = self.untied()
            still = {i for i, (a, b) in enumerate(zip(self.args, case.args)) if a.alias and not b.alias}
        moves = [a.values.kind == "float" and a.grad != "none" and i not in still for i, a in enumerate(case.args)]
        off = not keep_structure
        args = tuple(
            replace(a, values=replace(a.values, nudge=amount, nudge_seed=seed + i, nudge_off=off)) if move else a
            for i, (a, move) in enumerate(zip(case.args, moves))
        )
        data = {i: case._moved(i, t, amount, seed + i, off) if moves[i] else t for i, t in case.data.items()}
        return replace(case, args=args, data=data)

    def _moved(self, i: int, storage: torch.Tensor, amount: float, seed: int, off: bool = False) -> torch.Tensor:
        """Pinned storage ``i`` nudged: each float element (each part of a
        complex one) moved as ``Values`` nudges a draw, kinks avoided again;
        special positions keep their values, and unless ``off``,
        ``values.constant`` dims stay constant (stride-0 dims are: their
        elements are one storage element) and the structure is put back."""
        if not (storage.dtype.is_floating_point or storage.dtype.is_complex):
            return storage
        a, values = self.args[i], self.args[i].values
        parts = torch.view_as_real(storage) if storage.dtype.is_complex else storage
        x = parts.detach().cpu().to(torch.float64).reshape(-1).numpy().copy()
        x += values._step(x.size, amount, seed, at=x)
        moved = numpy_tensor(values._pushed(x), parts.dtype).reshape(parts.shape)
        if storage.dtype.is_complex:
            moved = torch.view_as_complex(moved)
        lay, n = a.strided, math.prod(a.shape)
        if values.specials and n:
            where = torch.arange(lay.storage_size).as_strided(a.shape, lay.strides, lay.offset).reshape(-1)
            for pos, _ in values.specials:
                moved[where[pos % n]] = storage[where[pos % n]]
        view = lay.writable_view(moved, a.shape)
        if values.structure and not off:
            before = tensor_array(lay.writable_view(storage.detach().cpu(), a.shape))
            view.copy_(torch.from_numpy(np.asarray(restored(tensor_array(view), before, values.structure))))
        for d in () if off else values.constant:
            if d < view.dim() and view.shape[d] > 1:
                view.copy_(view.narrow(d, 0, 1).expand(view.shape).clone())
        return moved if storage.device == moved.device else moved.to(storage.device)

    def reseeded(self, k: int) -> Case:
        """The same structure with fresh values and probes: variant ``k`` (0 is itself).

        Shapes, layouts, aliasing and dtype are what Hypothesis pays to draw;
        values and probes are a seed each, so one drawn structure is cheaply
        tried at several points.
        """
        if k == 0:
            return self
        # _evolve keeps the cached per-structure plans (_plan, _fills, _leaf_views): only seeds
        # change. (Once per example of every check: kept lean.)
        seeded = self._seeded_params
        params = dict(self.params)
        for key in seeded:
            v = params[key]
            params[key] = {**v, "seed": _mix(v["seed"], k)}
        args = [_evolve(a, values=_evolve(a.values, seed=_mix(a.values.seed, k))) for a in self.args]
        return _evolve(self, data={}, args=tuple(args), params=params)

    @cached_property
    def _seeded_params(self) -> tuple[str, ...]:
        """The params holding a seed of their own (probes): each variant draws them anew."""
        return tuple(
            key for key, v in self.params.items() if (type(v) is dict or isinstance(v, Mapping)) and "seed" in v
        )

    def with_layouts(self, layouts: Sequence[Layout | None]) -> Case:
        """The same logical values in other layouts; arguments that share a
        storage keep their layouts, which place them relative to each other.
        Pinned values (a record's) go with their arguments: each view is
        filled with the values it showed, the memory around it drawn anew."""
        shared = {self.owner(i) for i, a in enumerate(self.args) if a.alias} | {
            i for i, a in enumerate(self.args) if a.alias
        }
        args = tuple(a if i in shared else replace(a, layout=l) for i, (a, l) in enumerate(zip(self.args, layouts)))
        moved = {i for i, (a, b) in enumerate(zip(self.args, args)) if a.layout != b.layout}
        relaid = replace(self, args=args, data={i: t for i, t in self.data.items() if i not in moved})
        data = dict(relaid.data)
        for fill in relaid._fills:
            if fill.i not in moved or fill.i not in self.data:
                continue
            before = self.args[fill.i].strided
            shown = self.data[fill.i].as_strided(fill.shape, before.strides, before.offset)
            storage = relaid._filled(fill).cpu()
            kept = tuple(slice(0, 1) if d in fill.narrow else slice(None) for d in range(len(fill.shape)))
            storage.as_strided(fill.sizes, fill.layout.strides, fill.layout.offset).copy_(shown[kept])
            data[fill.i] = storage
        return replace(relaid, data=data)

    @property
    def aliased(self) -> bool:
        """Some argument is a view of a leaf storage or shares memory with another."""
        return any(a.alias is not None or a.grad == "view" for a in self.args)

    # -- JSON: read back by fuzzdiff.record.format.case_from_json -----------------------

    def to_json(self) -> dict[str, Any]:
        """The recipe; pinned ``data`` is not part of it (corpus records store it)."""
        out = _jsonable(asdict(replace(self, data={})))
        del out["data"]
        for arg in out["args"]:
            # written only when set: a case without structured points keeps the
            # record format it always had (docs/pages/design.md, contract 4)
            values = arg["values"]
            if not values.get("structure"):
                values.pop("structure", None)
                if not values.get("nudge_off"):
                    values.pop("nudge_off", None)
        if not out["copies"]:
            del out["copies"]
        return out


def _mix(seed: int, k: int) -> int:
    """A seed for variant ``k``, far from seed + 1 (splitmix64's constants)."""
    z = (int(seed) + 0x9E3779B97F4A7C15 * k) & 0xFFFF_FFFF_FFFF_FFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFF_FFFF_FFFF_FFFF
    return (z ^ (z >> 31)) & 0xFFFF_FFFF


def _jsonable(x: Any) -> Any:
    if isinstance(x, float):
        if math.isfinite(x):
            return x
        return {"float": x.hex()}
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x
