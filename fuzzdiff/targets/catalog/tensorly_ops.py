"""tensorly's core and tenalg functions on its pytorch backend (family ``tensorly``).

Each target's ``fn`` is a ``TensorlyCall``: the body runs with tensorly's
pytorch backend set for the calling thread only (pytest-xdist, threads of
``fuzzdiff run``), and the same body can run on the numpy backend, which the
``backend`` check compares it with. Shapes stay tiny (sides up to 3): every
function here is a multilinear contraction, so size adds cost, not coverage.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import tensorly as tl
from hypothesis import strategies as st
from tensorly import tenalg

from fuzzdiff.targets import Target, register
from fuzzdiff.targets.discrepancies import EAGER_CHECKS
from fuzzdiff.targets.known import Known

__all__ = ["TensorlyCall", "backend"]

FAMILY = "tensorly"
SIDE = 3


@contextmanager
def backend(name: str):
    """tensorly's backend ``name`` for this thread only, restored afterwards.
    (tl.backend_context restores with a global set_backend, which would change
    the default of every other thread.)"""
    old = tl.get_backend()
    tl.set_backend(name, local_threadsafe=True)
    try:
        yield
    finally:
        tl.set_backend(old, local_threadsafe=True)


@dataclass(frozen=True)
class TensorlyCall:
    """``body(*tensors, **kwargs)`` on the pytorch backend; ``cross_backend(name)``
    is the same body on another backend, for the ``backend`` check."""

    body: Callable
    name: str = "pytorch"

    def __call__(self, *args, **kwargs):
        with backend(self.name):
            return self.body(*args, **kwargs)

    def cross_backend(self, name: str) -> TensorlyCall:
        return TensorlyCall(self.body, name)


def unfold(x, mode):
    return tl.unfold(x, mode)


def fold(m, mode):
    """An (a, 6) unfolding folded back into a 3-way tensor with ``a`` at ``mode``."""
    shape = [2, 3]
    shape.insert(mode, m.shape[0])
    return tl.fold(m, mode, shape)


def mode_dot(x, m, mode):
    return tenalg.mode_dot(x, m, mode)


def multi_mode_dot(x, a, b, c):
    return tenalg.multi_mode_dot(x, [a, b, c])


def khatri_rao(a, b, c):
    return tenalg.khatri_rao([a, b, c])


def kronecker(a, b):
    return tenalg.kronecker([a, b])


def inner(x, y):
    return tenalg.inner(x, y)


def inner_mode(x, y):
    return tenalg.inner(x, y, n_modes=1)


def outer(x, y, z):
    return tenalg.outer([x, y, z])


def cp_to_tensor(w, a, b, c):
    return tl.cp_to_tensor((w, [a, b, c]))


def cp_to_unfolded(w, a, b, c, mode):
    return tl.cp_to_unfolded((w, [a, b, c]), mode)


def tucker_to_tensor(g, a, b, c):
    return tl.tucker_to_tensor((g, [a, b, c]))


def tt_to_tensor(g0, g1, g2):
    return tl.tt_to_tensor([g0, g1, g2])


def tr_to_tensor(g0, g1, g2):
    return tl.tr_to_tensor([g0, g1, g2])


def tt_matrix_to_tensor(g0, g1):
    return tl.tt_matrix_to_tensor([g0, g1])


def unfolding_dot_khatri_rao(x, w, a, b, c, mode):
    return tenalg.unfolding_dot_khatri_rao(x, (w, [a, b, c]), mode)


# Compiling tensorly's Python-level dispatch takes 10-100 s per target on a CPU
# runner (and dynamo raised InternalTorchDynamoError on mode_dot): out of CI's reach.
_SLOW_TRACE = "tensorly's backend dispatch takes dynamo 10-100 s to compile per target; too slow for the suite"
# compiled_autograd compiles a forward too, and export traces the dispatch as dynamo does
SKIP = {"compile": _SLOW_TRACE, "compiled_autograd": _SLOW_TRACE, "export": _SLOW_TRACE}

KRON = Known(
    (*EAGER_CHECKS, "vmap", "backend", "per_sample"),
    "torch.kron raises when exactly one of two 2-d operands is transposed (torch 2.13.0 CPU), "
    "forward only, no autograd needed. tenalg.kronecker on the pytorch backend is torch.kron, "
    "so every check can draw it",
    "torch.kron(torch.randn(2, 2), torch.randn(2, 2).t()) -> RuntimeError: view size is not "
    "compatible with input tensor's size and stride (at least one dimension spans across two "
    "contiguous subspaces). Use .reshape(...) instead.; torch.kron(torch.randn(2, 2), "
    "torch.randn(2, 2).t().contiguous()) works",
    raises="RuntimeError",
    message=r"view size is not compatible with input tensor's size and stride",
    records=(
        "ad865ff3e07c5324",
        "9adbf0ef8558ad74",
        "5fd69a3f11cd0c51",
        "473b97fe20fccd45",
        "8142a93e72530cff",
        "d215b13efb6af267",
        "527b5b480aa4c681",
        "ef16b74038e31354",
    ),
)


def _t(name, body, spec, **options):
    # min_side=1: tensorly reshapes with -1, which is ambiguous for 0 elements
    # ("cannot reshape tensor of 0 elements into shape [0, -1]"): a tensorly limitation.
    call = TensorlyCall(body)
    return Target(
        name, call, spec, FAMILY, min_side=1, max_side=SIDE, skip=SKIP, cross_backend=call.cross_backend, **options
    )


MODE3 = {"mode": st.integers(0, 2)}
CP = "w: r, a: i r, b: j r, c: k r"

register(
    _t("tl_unfold", unfold, "x: i j k", kwargs=MODE3),
    _t("tl_fold", fold, "m: a 6", kwargs=MODE3),
    _t("tl_mode_dot", mode_dot, "x: n n n, m: r n", kwargs=MODE3),
    _t("tl_multi_mode_dot", multi_mode_dot, "x: i j k, a: r i, b: s j, c: t k"),
    _t("tl_khatri_rao", khatri_rao, "a: i r, b: j r, c: k r"),
    _t("tl_kronecker", kronecker, "a: i j, b: k l", known=(KRON,)),
    _t("tl_inner", inner, "x: i j, y: i j"),
    _t("tl_inner_mode", inner_mode, "x: i j, y: j k"),
    _t("tl_outer", outer, "x: i, y: j, z: k"),
    _t("tl_cp_to_tensor", cp_to_tensor, CP),
    _t("tl_cp_to_unfolded", cp_to_unfolded, CP, kwargs=MODE3),
    _t("tl_tucker_to_tensor", tucker_to_tensor, "g: r s t, a: i r, b: j s, c: k t"),
    _t("tl_tt_to_tensor", tt_to_tensor, "g0: 1 i r, g1: r j s, g2: s k 1"),
    _t("tl_tr_to_tensor", tr_to_tensor, "g0: r i s, g1: s j t, g2: t k r"),
    _t("tl_tt_matrix_to_tensor", tt_matrix_to_tensor, "g0: 1 i j r, g1: r k l 1"),
    _t("tl_unfolding_dot_khatri_rao", unfolding_dot_khatri_rao, "x: i j k, " + CP, kwargs=MODE3),
)
