"""Reductions and scans, with a ``dim`` valid for the drawn rank and ``keepdim``.

Tensors are drawn up to rank 3 (``x: _ ...``) or from rank 0 (``x: ...``, where
torch accepts dim 0 and -1 of a 0-dim tensor). Grid values (multiples of 0.25)
put exact zeros into prod and cumprod, whose backward has special cases there.
"""

import torch
from hypothesis import strategies as st

from fuzzdiff.targets import Target, register
from fuzzdiff.targets.catalog import _kw
from fuzzdiff.targets.discrepancies import REVERSE_OVER_FORWARD_INPLACE
from fuzzdiff.targets.known import Known

FAMILY = "reductions"


def vector_norm(x, ord, dim, keepdim):
    return torch.linalg.vector_norm(x, ord, dim, keepdim)


def max_dim(x, dim, keepdim):
    return torch.max(x, dim, keepdim).values


def median_dim(x, dim, keepdim):
    return torch.median(x, dim, keepdim).values


MEDIAN_STRIDE0 = Known(
    ("forward", "layout", "alias", "dtype", "grad", "gradgrad", "device"),
    "torch.median(x, dim) (and torch.nanmedian) on CPU read memory outside an expanded "
    "(stride-0) input and return a value that is not in it (torch 2.13.0 CPU; median without "
    "dim, kthvalue, sort are right). The checks see outputs that change with the layout or "
    "under aliasing, and tangents that disagree with finite differences of the wrong values",
    "torch.median(torch.tensor([1.25]).expand(3), 0).values -> 4.5611e-41 (garbage); s = "
    "torch.tensor([0.5, 1.25, -0.3, 0.7]); torch.median(s[1:2].expand(3), 0).values -> 0.7 "
    "(expected 1.25; .clone() first gives 1.25)",
    features=("stride0",),
)


def logcumsumexp_last(x):
    return torch.logcumsumexp(x, -1)


LOGCUMSUMEXP_EMPTY = Known(
    ("forward", "gradgrad", "vmap", "forward2"),
    "forward-mode AD of torch.logcumsumexp raises on a scan over a size-0 dim, where the "
    "primal and reverse mode return empty tensors (torch 2.13.0 CPU; gradgrad reaches it "
    "through forward-over-reverse, vmap through its jvp compositions)",
    "x = torch.zeros(0, dtype=torch.float64); with fwAD.dual_level(): torch.logcumsumexp("
    "fwAD.make_dual(x, torch.zeros_like(x)), 0) -> IndexError: max(): Expected reduction dim 0 "
    "to have non-zero size.",
    raises="IndexError",
    message=r"max\(\): Expected reduction dim \d+ to have non-zero size",
    records=("e4cd404aa757f86f", "0fb5de19bbb1a202", "65a68700e2686a74"),
)


def cummax(x, dim):
    return torch.cummax(x, dim).values


CUMPROD_JVP_AT_ZERO = Known(
    "forward2",
    "reverse mode through the jvp of torch.cumprod gives nan at an exact zero of the input, where "
    "cumprod is a polynomial: its forward-mode formula divides by the input (torch 2.13.0 CPU; "
    "reverse over reverse, forward over reverse and nested jvp are right there)",
    "x = torch.tensor([1.0, 0.0, 2.0], dtype=torch.float64, requires_grad=True); with "
    "fwAD.dual_level(): t = fwAD.unpack_dual(torch.cumprod(fwAD.make_dual(x, torch.ones(3, "
    "dtype=torch.float64)), 0)).tangent; torch.autograd.grad(t.sum(), x) -> [3., nan, 1.]; at "
    "[1.0, 1.5, 2.0] it is [4.5, 4.0, 2.5]",
    message=r"^<w, d2f\[u, u'\]> reverse-over-forward vs finite differences: analytic nan",
    features=("value:zero",),
    records=("e748d616911a4660",),
)

register(
    Target("sum", torch.sum, "x: _ ...", FAMILY, kwargs={"dim": _kw.opt_dims(), "keepdim": _kw.keepdim}),
    # the mean of no values is 0/0: reduced dims hold a value, or the output is empty
    Target("mean", torch.mean, "x: _ ...", FAMILY, kwargs={"dim": _kw.reduced(), "keepdim": _kw.keepdim}),
    # prod and cumprod are smooth at an exact zero: a backward that divides by x is wrong there
    Target(
        "prod",
        torch.prod,
        "x: ...",
        FAMILY,
        structured=("zeros", "all_zero"),
        kwargs={"dim": _kw.dim(), "keepdim": _kw.keepdim},
    ),
    # correction=1 over one value is 0/0 (nan): reduce over 2 values or more
    Target(
        "var",
        torch.var,
        "x: _ ...",
        FAMILY,
        kwargs={"dim": _kw.reduced(min_count=2), "keepdim": _kw.keepdim, "correction": st.sampled_from([0, 1])},
    ),
    # std is a cone (not differentiable) where every value in a slice is equal
    Target(
        "std",
        torch.std,
        "x: _ ...",
        FAMILY,
        distinct=True,
        structured=("ties",),
        kwargs={"dim": _kw.reduced(min_count=2), "keepdim": _kw.keepdim, "correction": st.sampled_from([0, 1])},
    ),
    # |x|^p: a kink at 0 for p = 1, an infinite second derivative for p < 2
    Target(
        "norm",
        vector_norm,
        "x: _ ...",
        FAMILY,
        kinks=(0.0,),
        structured=("zeros", "all_zero"),  # a kink for ord=1, smooth for ord=2 unless the whole slice is zero
        kwargs={"ord": st.sampled_from([2, 1, 3, 1.5]), "dim": _kw.opt_dims(), "keepdim": _kw.keepdim},
        known=(REVERSE_OVER_FORWARD_INPLACE,),
    ),
    # the logsumexp of no values is -inf
    Target(
        "logsumexp",
        torch.logsumexp,
        "x: _ ...",
        FAMILY,
        kwargs={"dim": _kw.reduced(full=False), "keepdim": _kw.keepdim},
        known=(REVERSE_OVER_FORWARD_INPLACE,),
    ),
    # amax/amin reject reducing a size-0 dim (there is no identity): min_side=1
    Target(
        "amax",
        torch.amax,
        "x: _ ...",
        FAMILY,
        distinct=True,
        structured=("ties",),  # a tie is a kink: inconclusive, never a failure
        min_side=1,
        kwargs={"dim": _kw.dims(), "keepdim": _kw.keepdim},
    ),
    Target(
        "amin",
        torch.amin,
        "x: _ ...",
        FAMILY,
        distinct=True,
        structured=("ties",),  # a tie is a kink: inconclusive, never a failure
        min_side=1,
        kwargs={"dim": _kw.dims(), "keepdim": _kw.keepdim},
    ),
    Target(
        "max_dim",
        max_dim,
        "x: _ ...",
        FAMILY,
        distinct=True,
        structured=("ties",),  # a tie is a kink: inconclusive, never a failure
        min_side=1,
        kwargs={"dim": _kw.dim(), "keepdim": _kw.keepdim},
    ),
    Target(
        "median_dim",
        median_dim,
        "x: _ ...",
        FAMILY,
        distinct=True,
        structured=("ties",),  # a tie is a kink: inconclusive, never a failure
        min_side=1,
        kwargs={"dim": _kw.dim(), "keepdim": _kw.keepdim},
        known=(MEDIAN_STRIDE0,),
    ),
    Target("cumsum", torch.cumsum, "x: ...", FAMILY, kwargs={"dim": _kw.dim()}),
    Target(
        "cumprod",
        torch.cumprod,
        "x: ...",
        FAMILY,
        structured=("zeros", "all_zero"),
        kwargs={"dim": _kw.dim()},
        known=(CUMPROD_JVP_AT_ZERO,),
    ),
    # forward AD raises on a scan over a size-0 dim: here the scanned dim is
    # non-empty, and logcumsumexp_empty below holds the discrepancy
    Target(
        "logcumsumexp",
        torch.logcumsumexp,
        "x: ...",
        FAMILY,
        kwargs={"dim": _kw.nonempty_dim()},
        known=(REVERSE_OVER_FORWARD_INPLACE,),
    ),
    Target("logcumsumexp_empty", logcumsumexp_last, "x: ... 0", FAMILY, known=(LOGCUMSUMEXP_EMPTY,)),
    Target("cummax", cummax, "x: ...", FAMILY, distinct=True, structured=("ties",), kwargs={"dim": _kw.dim()}),
    Target("trace", torch.trace, "x: n m", FAMILY),
)
