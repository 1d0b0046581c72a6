"""Gathers, scatters and masks: integer ``Index`` and boolean ``Mask`` arguments.

Index values are drawn in ``[0, size of the named dim)``; duplicates are
common, which is what makes the accumulating backward (index_add, scatter_add)
interesting. Specs put the indexed dim last, after any variadic group.
Index-valued arguments need a non-empty dim to index into: min_side=1.
"""

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from fuzzdiff.targets import Index, Mask, Target, register
from fuzzdiff.targets.catalog import _kw
from fuzzdiff.targets.discrepancies import (
    EAGER_CHECKS,
    JVP_TANGENT_COPY_DYNAMIC,
    JVP_VIEW_AOT_FUNCTION,
    VMAP_SYMBOLIC_SIZES_DYNAMIC,
)
from fuzzdiff.targets.known import Known

FAMILY = "indexing"
ALONG = "x: *b n, i: *b k"


def gather(x, i):
    return torch.gather(x, -1, i)


def index_put_shifted_value(x, i, v, shift):
    """A 0-dim value moved by a Python number, accumulated at indices: how
    code sets entries from a scalar parameter (``v + shift`` meets the
    destination's dtype)."""
    return x.index_put((i,), v + shift, accumulate=True)


# Found by index_put_shifted_value; upstream: pytorch/pytorch#90065 (open), on 2.13.0 and 2.15.0 alike.
JVP_SCALAR_TANGENT_FLOAT64 = Known(
    ("forward", "forward2", "vmap", "compile"),
    "torch.func.jvp gives a 0-dim float32 tensor plus (or times) a Python float a float64 tangent "
    "while its primal stays float32 (the forward-AD formula of add and mul combines the tangent "
    "with a zero tensor of the wrapped number's dtype, which loses its wrapped-number standing in "
    "type promotion: pytorch/pytorch#90065); an op that needs its operands' dtypes to match then "
    "raises (index_put, scatter), and stack and cat give float64 tangents of float32 outputs "
    "(torch 2.13.0 CPU, 2.15.0; torch.autograd.forward_ad gives float32, as do 1-dim tensors)",
    "x = torch.randn(4); i = torch.tensor([1, 1, 3]); v, u = torch.tensor(0.5), torch.tensor(1.0); "
    "torch.func.jvp(lambda v: x.index_put((i,), v + 0.5, accumulate=True), (v,), (u,)) -> "
    "RuntimeError: Index put requires the source and destination dtypes match, got Float for the "
    "destination and Double for the source; torch.func.jvp(lambda v: v + 0.5, (v,), (u,)) gives "
    "a float32 primal and a float64 tangent",
    raises="RuntimeError",
    message=r"Index put requires the source and destination dtypes match, got Float for the destination and Double",
    dtypes=("float32",),
    records=("20ed08f924f2ae50", "72a6637a73f1db26"),
)


INDUCTOR_INDEX_PUT_SIZE1_DYNAMIC = Known(
    "compile",
    "inductor with dynamic shapes fails in code generation (an AssertionError of its scheduler, on "
    "the Scatter buffer in atomic_add mode) for an accumulating index_put of a 0-dim value into a "
    "tensor of size 1 (torch 2.13.0 CPU; size 3, dynamic=False and aot_eager compile; torch 2.15.0 "
    "compiles it)",
    "def f(x, i, v): return x.index_put((i,), v, accumulate=True); torch.compile(f, "
    "backend='inductor', dynamic=True)(torch.zeros(1, dtype=torch.float64), torch.tensor([0, 0]), "
    "torch.tensor(0.3, dtype=torch.float64)) -> InductorError: AssertionError (eager: tensor([0.6]))",
    raises="InductorError",
    message=r"^raised InductorError: AssertionError",
    params={"backend": "inductor"},
    # no record: replayed inside a process that compiled other graphs before, it
    # compiles (inductor's caches), so it does not replay reliably; the evidence does
    fixed_in="2.15.0",
)


def take_along_dim(x, i):
    return torch.take_along_dim(x, i, dim=-1)


def index_select(x, i):
    return torch.index_select(x, -1, i)


def scatter(x, i, src, length):
    """torch.scatter with an index that is unique along the dim: with duplicate
    indices which value lands is unspecified, so the drawn integers are turned
    into a permutation of 0..n-1 (a stable argsort) and its first ``length``
    entries are used."""
    perm = torch.argsort(i, dim=-1, stable=True)
    length = min(length, x.shape[-1])
    return torch.scatter(x, -1, perm.narrow(-1, 0, length), src.narrow(-1, 0, length))


def scatter_add(x, i, src):
    return torch.scatter_add(x, -1, i, src)


def gather_dim(x, i, dim):
    return torch.gather(x, dim, i)


def scatter_add_dim(x, i, src, dim):
    return torch.scatter_add(x, dim, i, src)


def scatter_reduce_dim(x, i, src, dim, reduce, include_self):
    return torch.scatter_reduce(x, dim, i, src, reduce, include_self=include_self)


def _index_fits(s) -> bool:
    """A scatter's index smaller than its source: no larger than src in any dim,
    nor than x but in the last (the indexed one). Bug reports keep coming from
    backward formulas that assume equal sizes."""
    (p, k), (q, r), (m, _) = s["i"], s["src"], s["x"]
    return p <= q and k <= r and p <= m


def scatter_reduce(x, i, src, reduce, include_self):
    return torch.scatter_reduce(x, -1, i, src, reduce, include_self=include_self)


def index_add(x, i, src, alpha):
    return torch.index_add(x, -1, i, src, alpha=alpha)


def masked_fill(x, m, value):
    return torch.masked_fill(x, m, value)


def masked_fill_tensor(x, m, v):
    return torch.masked_fill(x, m, v)


def masked_select(x, m):
    return torch.masked_select(x, m)


def embedding(i, w):
    return F.embedding(i, w)


def getitem(x, i):
    return x[..., i, :]


SCATTER_SRC_LARGER_THAN_INDEX = Known(
    (*EAGER_CHECKS, "vmap", "compile", "compiled_autograd", "export", "backend"),
    "the backward of torch.scatter_add and torch.scatter_reduce returns src's gradient in the "
    "index's shape when src is larger than the index, which torch allows (only the first "
    "index-shaped part of src is scattered), and autograd refuses it (torch 2.13.0 CPU)",
    "x = torch.randn(3, 4, dtype=torch.float64); src = torch.randn(3, 3, dtype=torch.float64, "
    "requires_grad=True); torch.scatter_add(x, 1, torch.zeros(2, 2, dtype=torch.long), "
    "src).sum().backward() -> RuntimeError: Function ScatterAddBackward0 returned an invalid "
    "gradient at index 1 - got [2, 2] but expected shape compatible with [3, 3]",
    raises="RuntimeError",
    message=r"Function Scatter(Add|Reduce)Backward0 returned an invalid gradient at index 1 - got ",
    records=("705aa1d0f90066fd", "86dda618ef137f8d", "e3836ea7ef81fd1c"),
)


register(
    Target("gather", gather, ALONG, FAMILY, min_side=1, kinds={"i": Index("n")}),
    Target(
        "take_along_dim",
        take_along_dim,
        ALONG,
        FAMILY,
        min_side=1,
        kinds={"i": Index("n")},
        known=(JVP_VIEW_AOT_FUNCTION, VMAP_SYMBOLIC_SIZES_DYNAMIC),
    ),
    Target(
        "index_select",
        index_select,
        "x: *b n, i: k",
        FAMILY,
        min_side=1,
        kinds={"i": Index("n")},
        known=(JVP_TANGENT_COPY_DYNAMIC,),
    ),
    Target(
        "scatter",
        scatter,
        "x: *b n, i: *b n, src: *b n",
        FAMILY,
        min_side=1,
        kinds={"i": Index("n")},
        kwargs={"length": st.integers(0, 4)},
    ),
    Target("scatter_add", scatter_add, "x: *b n, i: *b k, src: *b k", FAMILY, min_side=1, kinds={"i": Index("n")}),
    # sum and mean accumulate: smooth in every value, duplicates or not
    Target(
        "scatter_reduce",
        scatter_reduce,
        "x: *b n, i: *b k, src: *b k",
        FAMILY,
        min_side=1,
        kinds={"i": Index("n")},
        kwargs={"reduce": st.sampled_from(["sum", "mean"]), "include_self": st.booleans()},
    ),
    # An index smaller than the source in the dims it does not index (torch allows
    # index.size(d) <= input.size(d), and <= src.size(d) in every dim for a scatter)
    Target(
        "gather_smaller_index",
        gather_dim,
        "x: m n, i: p k",
        FAMILY,
        min_side=1,
        kinds={"i": Index("n")},
        kwargs={"dim": _kw.when(lambda s: s["i"][0] <= s["x"][0], -1)},
    ),
    Target(
        "scatter_add_smaller_index",
        scatter_add_dim,
        "x: m n, i: p k, src: p k",
        FAMILY,
        min_side=1,
        kinds={"i": Index("n")},
        kwargs={"dim": _kw.when(lambda s: s["i"][0] <= s["x"][0], -1)},
    ),
    Target(
        "scatter_reduce_smaller_index",
        scatter_reduce_dim,
        "x: m n, i: p k, src: p k",
        FAMILY,
        min_side=1,
        kinds={"i": Index("n")},
        kwargs={
            "dim": _kw.when(lambda s: s["i"][0] <= s["x"][0], -1),
            "reduce": st.sampled_from(["sum", "mean"]),
            "include_self": st.booleans(),
        },
    ),
    # src larger than the index too: only its first index-shaped part is scattered
    Target(
        "scatter_add_larger_src",
        scatter_add_dim,
        "x: m n, i: p k, src: q r",
        FAMILY,
        min_side=1,
        kinds={"i": Index("n")},
        kwargs={"dim": _kw.when(_index_fits, -1)},
        known=(SCATTER_SRC_LARGER_THAN_INDEX,),
    ),
    Target(
        "index_add",
        index_add,
        "x: *b n, i: k, src: *b k",
        FAMILY,
        min_side=1,
        kinds={"i": Index("n")},
        kwargs={"alpha": st.sampled_from([1.0, -2.0])},
    ),
    Target(
        "masked_fill",
        masked_fill,
        "x: *b, m: *#b",
        FAMILY,
        kinds={"m": Mask()},
        kwargs={"value": st.sampled_from([0.0, -1.5])},
    ),
    Target("masked_fill_tensor", masked_fill_tensor, "x: *b, m: *#b, v:", FAMILY, kinds={"m": Mask()}),
    Target("masked_select", masked_select, "x: *#b, m: *#b", FAMILY, kinds={"m": Mask()}),
    Target(
        "index_put_shifted_value",
        index_put_shifted_value,
        "x: n, i: k, v:",
        FAMILY,
        min_side=1,
        kinds={"i": Index("n")},
        kwargs={"shift": st.sampled_from([0.5, -2.0])},
        known=(JVP_SCALAR_TANGENT_FLOAT64, INDUCTOR_INDEX_PUT_SIZE1_DYNAMIC),
    ),
    Target("embedding", embedding, "i: ..., w: n d", FAMILY, min_side=1, kinds={"i": Index("n")}),
    Target("index_tensor", getitem, "x: *b n m, i: k", FAMILY, min_side=1, max_side=3, kinds={"i": Index("n")}),
)
