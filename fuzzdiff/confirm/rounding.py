"""Rounding emulated in float64 (Monte Carlo arithmetic): how far a result
moves when every intermediate result is rounded, which moving the inputs
alone misses (a saturated tanh before a normalization, a sum of large terms
that cancel). fuzzdiff.confirm.low_precision asks it of low precision, and
fuzzdiff.confirm.steps of two ways of one computation in float64 itself."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from fuzzdiff.case import draws
from fuzzdiff.confirm.ladder import on_time

__all__ = ["RoundingNoise", "ConditionedOpNoise", "CONDITIONED_OPS", "own_rule"]


class RoundingNoise(TorchDispatchMode):
    """Low precision's rounding, emulated in float64 (Monte Carlo arithmetic):
    every fresh floating result of an op on floating tensors is moved by
    ``unit`` (float32's unit roundoff by default), relatively, up or down at
    random. How far that moves a float64 result is its conditioning in every
    intermediate, which moving the inputs alone misses. Below ``tiny`` (the
    dtype's smallest normal value) the dtype's rounding is absolute, not
    relative: a value there moves by ``unit * tiny``, half the dtype's
    smallest subnormal, and one that underflows to a subnormal or to zero is
    off by a part of itself as large as that. Exact zeros stay: a zero is one
    in every dtype.

    A view computes nothing and is left alone, as are results of ops without
    floating tensor arguments (``arange``, ``ones``; an integer cast):
    constants, not rounded values. An in-place or out= result is fresh values
    written into an argument (``sigmoid_`` in an RNN cell: a saturated gate
    that float32 holds as exactly 1), and is rounded where it lies. Seeded, so
    a repeat moves everything the same way.

    A result of a dtype coarser than the rounding emulated (a float32
    intermediate in a float64 run: the code casts down on purpose) is moved by
    its own dtype's rounding, a unit in its last place, and ``lowered`` names
    its dtype; with ``lowered_only`` only those are moved. A result in a
    floating dtype no coarser than that, other than float64, is left alone.

    ``rules`` names the code's own derivative rules (``backward`` of an
    ``autograd.Function`` or of a custom op's registered autograd) that ran
    ops; with ``spare_rules`` their results are left exact, so that what
    rounding elsewhere explains can be told from what the rules' own
    formulas lose.
    """

    def __init__(
        self,
        unit: float = torch.finfo(torch.float32).eps / 2,
        seed: int = 0,
        tiny: float = torch.finfo(torch.float32).tiny,
        spare_rules: bool = False,
        lowered_only: bool = False,
    ):
        super().__init__()
        self.unit, self.tiny, self.spare_rules, self.lowered_only = unit, tiny, spare_rules, lowered_only
        self.seed, self.drawn = seed, 0  # a counter-based stream (fuzzdiff.case.draws): replays exactly
        self.rules: set[str] = set()
        self.lowered: set[str] = set()  # the lower-precision dtypes of the results it rounded

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        on_time()  # a solver's loop, rounded op by op, runs thousands of them
        out = func(*args, **(kwargs or {}))
        rule = own_rule(torch._C._current_autograd_node())
        if rule is not None:
            self.rules.add(rule)
            if self.spare_rules:
                return out
        returns = [r.alias_info for r in func._schema.returns]
        if any(a is not None and not a.is_write for a in returns):
            return out  # a view
        if not any(
            isinstance(a, torch.Tensor) and (a.is_floating_point() or a.is_complex())
            for a in tree_leaves((args, kwargs))
        ):
            return out
        if any(a is not None for a in returns):  # in place or out=: round the written tensors where they lie
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.dtype not in (torch.float64, torch.complex128):
                    continue  # a lower-precision result written in place may be saved for a backward already
                rounded = self._round(t)
                if rounded is not t:
                    with torch.no_grad():
                        t.copy_(rounded)
            return out
        return tree_map(self._round, out)

    def _round(self, t):
        if not isinstance(t, torch.Tensor) or not (t.is_floating_point() or t.is_complex()):
            return t
        if t.layout != torch.strided or not t.numel():
            return t
        unit, wide = self.unit, t.dtype in (torch.float64, torch.complex128)
        if not wide:
            if torch.finfo(t.dtype).eps / 2 <= self.unit:
                return t  # no coarser than the rounding emulated: the run's own dtype
            # an intermediate result of lower precision than the run emulates (a .float() cast
            # in a float64 run, a softmax in float32): its own rounding, an ulp either way
            self.lowered.add(str(t.dtype).removeprefix("torch."))
            unit = torch.finfo(t.dtype).eps
        elif self.lowered_only:
            return t
        z = draws.words(self.seed, t.numel(), draws.ROUNDING, start=self.drawn)
        self.drawn += t.numel()
        signs = torch.from_numpy(draws.bits(z).astype(np.float64)).reshape(t.shape)
        w = t if wide else t.to(torch.complex128 if t.is_complex() else torch.float64)
        # the size the dtype's rounding is relative to: |t|, or tiny below it (sgn(0) = 0: zeros
        # stay); an infinity stays too (a mask's -inf before a softmax: inf - inf would be nan)
        size = torch.where(w.abs() < self.tiny, torch.sgn(w) * self.tiny, w)
        moved = w + size * (signs * (2 * unit) - unit).to(t.device)
        return torch.where(torch.isinf(w), w, moved).to(t.dtype)


def own_rule(node) -> str | None:
    """The derivative rule of the code's own that autograd ``node`` runs, in
    words ("Square's backward"); None for torch's own formulas, and outside
    a backward."""
    cls = getattr(node, "_forward_cls", None)
    if cls is None:
        return None
    name = cls.__name__
    if name.startswith("GeneratedBackwardFor_"):  # a custom op's registered autograd (torch.library)
        namespace = name.removeprefix("GeneratedBackwardFor_").split("_", 1)[0]
        return None if namespace in ("aten", "prims") else f"{name.removeprefix('GeneratedBackwardFor_')}'s backward"
    module = getattr(cls, "__module__", "") or ""
    return None if module == "torch" or module.startswith("torch.") else f"{name}'s backward"


# Ops whose result no algorithm gets more accurate than their own conditioning
# allows (a solve at condition number k: k times the unit roundoff), and whose
# kernels are backward stable: the result is exact for inputs moved by rounding.
CONDITIONED_OPS = frozenset(
    f"aten::{name}"
    for name in (
        "_linalg_solve_ex",
        "linalg_solve_triangular",
        "triangular_solve",
        "cholesky_solve",
        "lu_solve",
        "linalg_lu_solve",
        "linalg_ldl_solve",
        "linalg_lstsq",
        "linalg_inv_ex",
        "cholesky_inverse",
        "linalg_cholesky_ex",
        "linalg_ldl_factor_ex",
        "linalg_lu_factor_ex",
        "linalg_lu",
        "linalg_qr",
        "geqrf",
        "ormqr",
        "linalg_householder_product",
        "_linalg_eigh",
        "linalg_eig",
        "_linalg_svd",
        "_linalg_det",
        "_linalg_slogdet",
        "linalg_matrix_exp",
    )
)


class ConditionedOpNoise(RoundingNoise):
    """Only the error that CONDITIONED_OPS cannot help: each one's floating
    inputs moved by ``unit`` before it runs (its backward error), nothing else.

    How far that moves a float64 result is what those ops' own conditioning
    costs in low precision, wherever the code put them: a solve of a matrix
    that is near singular at the point the code reached, though the code's
    result is well-conditioned in its inputs. ``met`` names the ops it moved."""

    def __init__(self, unit: float = torch.finfo(torch.float32).eps / 2, seed: int = 0):
        super().__init__(unit, seed, tiny=0.0)
        self.met: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        on_time()
        name = func._schema.name
        if name not in CONDITIONED_OPS:
            return func(*args, **(kwargs or {}))
        self.met.add(name)
        args, kwargs = tree_map(self._round, (args, kwargs or {}))
        return func(*args, **kwargs)
