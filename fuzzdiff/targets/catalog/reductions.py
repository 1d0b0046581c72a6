"""Reductions and scans, with a ``dim`` valid for the drawn rank and ``keepdim``.

Tensors are drawn up to rank 3 (``x: _ ...``) or from rank 0 (``x: ...``, where
torch accepts dim 0 and -1 of a 0-dim tensor). Grid values (multiples of 0.25)
put exact zeros into prod and cumprod, whose backward has special cases there.
"""

import torch
from hypothesis import strategies as st

from fuzzdiff.targets import Target, register
from fuzzdiff.targets.catalog import _kw

FAMILY = "reductions"


def vector_norm(x, ord, dim, keepdim):
    return torch.linalg.vector_norm(x, ord, dim, keepdim)


def max_dim(x, dim, keepdim):
    return torch.max(x, dim, keepdim).values


def median_dim(x, dim, keepdim):
    return torch.median(x, dim, keepdim).values


def cummax(x, dim):
    return torch.cummax(x, dim).values


register(
    Target("sum", torch.sum, "x: _ ...", FAMILY,
           kwargs={"dim": _kw.opt_dims(), "keepdim": _kw.keepdim}),
    Target("mean", torch.mean, "x: _ ...", FAMILY,
           kwargs={"dim": _kw.opt_dims(), "keepdim": _kw.keepdim}),
    Target("prod", torch.prod, "x: ...", FAMILY,
           kwargs={"dim": _kw.dim(), "keepdim": _kw.keepdim}),
    # correction=1 over a single element is 0/0 by definition (nan, with a warning)
    Target("var", torch.var, "x: _ ...", FAMILY,
           kwargs={"dim": _kw.opt_dims(), "keepdim": _kw.keepdim, "correction": st.sampled_from([0, 1])}),
    # std is a cone (not differentiable) where every value in a slice is equal
    Target("std", torch.std, "x: _ ...", FAMILY, distinct=True,
           kwargs={"dim": _kw.opt_dims(), "keepdim": _kw.keepdim, "correction": st.sampled_from([0, 1])}),
    # |x|^p: a kink at 0 for p = 1, an infinite second derivative for p < 2
    Target("norm", vector_norm, "x: _ ...", FAMILY, kinks=(0.0,),
           kwargs={"ord": st.sampled_from([2, 1, 3, 1.5]), "dim": _kw.opt_dims(), "keepdim": _kw.keepdim}),
    Target("logsumexp", torch.logsumexp, "x: _ ...", FAMILY,
           kwargs={"dim": _kw.dims(), "keepdim": _kw.keepdim}),
    # amax/amin reject reducing a size-0 dim (there is no identity): min_side=1
    Target("amax", torch.amax, "x: _ ...", FAMILY, distinct=True, min_side=1,
           kwargs={"dim": _kw.dims(), "keepdim": _kw.keepdim}),
    Target("amin", torch.amin, "x: _ ...", FAMILY, distinct=True, min_side=1,
           kwargs={"dim": _kw.dims(), "keepdim": _kw.keepdim}),
    Target("max_dim", max_dim, "x: _ ...", FAMILY, distinct=True, min_side=1,
           kwargs={"dim": _kw.dim(), "keepdim": _kw.keepdim}),
    Target("median_dim", median_dim, "x: _ ...", FAMILY, distinct=True, min_side=1,
           kwargs={"dim": _kw.dim(), "keepdim": _kw.keepdim}),
    Target("cumsum", torch.cumsum, "x: ...", FAMILY, kwargs={"dim": _kw.dim()}),
    Target("cumprod", torch.cumprod, "x: ...", FAMILY, kwargs={"dim": _kw.dim()}),
    Target("logcumsumexp", torch.logcumsumexp, "x: ...", FAMILY, kwargs={"dim": _kw.dim()}),
    Target("cummax", cummax, "x: ...", FAMILY, distinct=True, kwargs={"dim": _kw.dim()}),
    Target("trace", torch.trace, "x: n m", FAMILY),
)
