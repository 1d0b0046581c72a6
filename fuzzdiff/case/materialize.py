"""How a case becomes tensors: storages filled from their values, then viewed.

``Case`` inherits ``Materialization``: ``case.materialize()`` runs once per
variant of every example, so it stays a method of the case itself, with no
call in between; its per-structure plans (``_fills``, ``_plan``,
``_leaf_views``) are computed once and carried over by ``Case.reseeded``. The
values themselves come from ``fuzzdiff.case.values``; a corpus record pins them
exactly (``Case.data``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple, Protocol

import torch

from fuzzdiff.case.layout import Alias, CaseError, Layout
from fuzzdiff.case.values import Values

__all__ = ["Inputs", "Materialization"]


@dataclass
class Inputs:
    """Materialized tensors of a case.

    ``rebuild`` maps differentiable leaves to the target's arguments, so that a
    derivative check can run ``fn(*rebuild(leaves))`` at perturbed or dual leaves
    and still reproduce the fuzzed views and aliasing. ``sources[i]`` says where
    argument i comes from: ``(leaf index, None)`` when it is that leaf,
    ``(leaf index, layout)`` when it is a view of a storage leaf, or None.
    """

    args: list[torch.Tensor]
    leaves: list[torch.Tensor]
    rebuild: Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]
    sources: list[tuple[int, Layout | None] | None]


class Fill(NamedTuple):
    """How ``Materialization`` fills the storage of argument ``i``; see ``Materialization._fills``."""

    i: int
    shape: tuple[int, ...]
    layout: Layout
    dtype: torch.dtype
    how: str  # "flat" | "whole" | "junk"
    sizes: tuple[int, ...]
    narrow: tuple[int, ...]
    bad: str | None


class _Arg(Protocol):
    """What materializing reads of one argument: a ``fuzzdiff.case.case.Arg``, described
    by its reads because fuzzdiff.case.case imports this module and not the other way."""

    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def values(self) -> Values: ...
    @property
    def layout(self) -> Layout | None: ...
    @property
    def alias(self) -> Alias | None: ...
    @property
    def grad(self) -> str: ...
    @property
    def dtype(self) -> str | None: ...
    @property
    def strided(self) -> Layout: ...


class Materialization:
    """The tensors of a case: the half of ``Case`` that builds them.

    Reads the case's fields (``args``, ``data``, ``device``, ``copies``) and its
    ``arg_dtype``; see ``fuzzdiff.case.case.Case``.
    """

    args: Sequence[_Arg]
    data: Mapping[int, torch.Tensor]
    device: str
    copies: tuple[int, ...]
    arg_dtype: Callable[[int], torch.dtype]

    def owner(self, i: int) -> int:
        """The argument whose storage argument ``i`` lives in."""
        while (alias := self.args[i].alias) is not None:
            i = alias.of
        return i

    @cached_property
    def _fills(self) -> tuple[Fill, ...]:
        """How each storage is filled, checked once per structure (reseeded
        variants share it): a ``Fill`` per storage-owning argument ``i``.
        ``how`` is "flat" (the view is the
        contiguous storage itself), "whole" (the view covers the storage) or
        "junk" (memory outside the view is filled too); ``sizes`` is the
        writable view's shape, ``narrow`` the stride-0 dims, ``bad`` an error
        for unpinned values that do not repeat along a stride-0 dim."""
        for i, a in enumerate(self.args):
            if a.alias is not None and not 0 <= a.alias.of < i:
                raise CaseError(f"args[{i}].alias.of must name an earlier argument, got {a.alias.of}")
        fills = []
        for i in sorted({self.owner(i) for i in range(len(self.args))}):
            a, dtype = self.args[i], self.arg_dtype(i)
            lay = a.strided
            lay.check(a.shape, f"args[{i}].layout")
            bad = next(
                (
                    f"args[{i}].layout: stride 0 along dim {d}, but values.constant "
                    f"{list(a.values.constant)} does not make the values repeat there"
                    for d, (n, st) in enumerate(zip(a.shape, lay.strides))
                    if st == 0 and n > 1 and d not in a.values.constant
                ),
                None,
            )
            narrow = tuple(d for d, st in enumerate(lay.strides) if st == 0)
            if lay.storage_size != math.prod(a.shape) or narrow:
                how = "junk"
            elif lay.is_contiguous(a.shape):
                how = "flat"
            else:
                how = "whole"
            sizes = tuple(min(n, 1) if st == 0 else n for n, st in zip(a.shape, lay.strides))
            fills.append(Fill(i, tuple(a.shape), lay, dtype, how, sizes, narrow, bad))
        return tuple(fills)

    def _storage(self, i: int) -> torch.Tensor:
        fill = next((f for f in self._fills if f.i == i), None)
        if fill is None:
            raise CaseError(f"args[{i}] does not own a storage")
        return self._filled(fill)

    def _filled(self, fill: Fill) -> torch.Tensor:
        i, lay, dtype = fill.i, fill.layout, fill.dtype
        if i in self.data:
            pinned = self.data[i]
            if pinned.shape != (lay.storage_size,) or pinned.dtype != dtype:
                raise CaseError(
                    f"args[{i}]: pinned data is {pinned.dtype} of shape {list(pinned.shape)}, "
                    f"expected {dtype} of shape [{lay.storage_size}]"
                )
            return pinned.clone() if self.device == "cpu" else pinned.to(self.device)
        if fill.bad is not None:
            raise CaseError(fill.bad)
        values, shape = self.args[i].values, fill.shape
        if fill.how == "flat":
            # sample() returns a fresh contiguous tensor with a storage of its own
            # numel: in this layout it already is the storage, bit for bit.
            storage = values.sample(shape, dtype).reshape(-1)
        else:
            if fill.how == "whole":
                logical = values.sample(shape, dtype)
                storage = torch.empty(lay.storage_size, dtype=logical.dtype)  # the view covers it all
                storage.as_strided(fill.sizes, lay.strides, lay.offset).copy_(logical)
            else:
                # Memory outside the view holds in-domain junk: a kernel that reads it is caught.
                storage = values.filled(shape, dtype, lay, fill.narrow)
        return storage if self.device == "cpu" else storage.to(self.device)

    def storages(self) -> dict[int, torch.Tensor]:
        """Argument index -> the storage it owns, filled; what materialize() views."""
        return {fill.i: self._filled(fill) for fill in self._fills}

    def materialize(
        self,
        requires_grad: bool = True,
        cast: torch.dtype | None = None,
        storages: dict[int, torch.Tensor] | None = None,
    ) -> Inputs:
        """Build the tensors, bit for bit the same on every call.

        ``cast`` converts the case-dtype storages after their values are drawn:
        a float64 reference holding exactly the float32 case's values (a
        complex case goes to the complex dtype of ``cast``).
        ``storages`` (from ``self.storages()``) reuses values already drawn.
        """
        storages = self.storages() if storages is None else storages
        if cast is not None:
            args, wide = self.args, cast.to_complex()  # a complex case keeps its imaginary part
            storages = {
                i: t
                if args[i].dtype is not None or t.dtype in (cast, wide)
                else t.to(wide if t.dtype.is_complex else cast)
                for i, t in storages.items()
            }
        leaf_views, direct = self._leaf_views
        leaves = []
        for o, view in leaf_views:
            t = (storages[o] if view is None else storages[o].as_strided(*view)).detach()
            leaves.append(t.requires_grad_(True) if requires_grad else t)  # detach(): no grad
        rebuild: Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]
        if direct == "identity":
            rebuild = list  # argument i is leaf i: the common case, rebuilt six times per example
        elif direct is not None:  # every argument is a leaf itself: no views to rebuild

            def rebuild(ls: Sequence[torch.Tensor]) -> list[torch.Tensor]:
                return [ls[k] for k in direct]
        else:
            steps = self._plan[1]

            def rebuild(ls: Sequence[torch.Tensor]) -> list[torch.Tensor]:
                out: list[torch.Tensor] = []
                for kind, k, shape, strides, offset in steps:
                    if kind == "same":
                        out.append(out[k])
                    elif kind == "const":
                        out.append(storages[k].as_strided(shape, strides, offset))
                    elif kind == "view":
                        out.append(ls[k].as_strided(shape, strides, offset))
                    else:
                        out.append(ls[k])
                return out

        if self.copies:
            rebuild = _copying(rebuild, self.copies)
        return Inputs(rebuild(leaves), leaves, rebuild, self._plan[2])

    def recast(self, inputs: Inputs, cast: torch.dtype) -> Inputs | None:
        """``materialize(requires_grad=False, cast=cast)`` made from ``inputs``,
        which this case materialized and nothing has written into since, without
        drawing or viewing again: where every argument is a leaf of its own
        (else None: views and constants are rebuilt from their storages). The
        values are the same; the memory around a strided leaf is not kept."""
        if self.copies or self._leaf_views[1] != "identity":
            return None
        wide = cast.to_complex()
        leaves = [
            t if a.dtype is not None or t.dtype in (cast, wide) else t.to(wide if t.dtype.is_complex else cast)
            for a, t in zip(self.args, (l.detach() for l in inputs.leaves))
        ]
        return Inputs(list(leaves), leaves, list, inputs.sources)

    @cached_property
    def _leaf_views(self):
        """``_plan``'s leaves as ``(storage, as_strided args or None)``, and the
        leaf index of each argument when every argument is a leaf itself (else
        None; "identity" when argument i is leaf i)."""
        keys, steps, _ = self._plan
        views = []
        for o, whole in keys:
            lay = self.args[o].strided
            views.append((o, None if whole else (self.args[o].shape, lay.strides, lay.offset)))
        direct: tuple[int, ...] | str | None = (
            tuple(k for _, k, *_ in steps) if all(step[0] == "leaf" for step in steps) else None
        )
        if direct == tuple(range(len(steps))):
            direct = "identity"
        return tuple(views), direct

    @cached_property
    def _plan(self):
        """How arguments come from storages and leaves; the same for every materialize()."""
        owners = [self.owner(i) for i in range(len(self.args))]
        differentiable = sorted({o for o in owners if self.args[o].grad != "none"})
        whole = {
            owners[i]
            for i, a in enumerate(self.args)
            if a.grad == "view" or (a.alias is not None and a.alias.kind == "view")
        }
        leaf_of = {o: k for k, o in enumerate(differentiable)}
        steps: list[tuple[str, int, tuple[int, ...] | None, tuple[int, ...] | None, int | None]] = []
        sources: list[tuple[int, Layout | None] | None] = []
        for i, a in enumerate(self.args):
            o, lay = owners[i], a.strided
            if a.alias is not None and a.alias.kind == "same":
                steps.append(("same", a.alias.of, None, None, None))
                sources.append(sources[a.alias.of])
            elif o not in leaf_of:
                steps.append(("const", o, a.shape, lay.strides, lay.offset))
                sources.append(None)
            elif o in whole:
                steps.append(("view", leaf_of[o], a.shape, lay.strides, lay.offset))
                sources.append((leaf_of[o], lay))
            else:
                steps.append(("leaf", leaf_of[o], None, None, None))
                sources.append((leaf_of[o], None))
        keys = [(o, o in whole) for o in differentiable]
        return keys, tuple(steps), sources


def _copying(
    rebuild: Callable[[Sequence[torch.Tensor]], list[torch.Tensor]], copies: tuple[int, ...]
) -> Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]:
    """``rebuild`` with arguments ``copies`` made contiguous copies (differentiable)."""

    def rebuild_copies(leaves: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return [t.contiguous() if i in copies else t for i, t in enumerate(rebuild(leaves))]

    return rebuild_copies
