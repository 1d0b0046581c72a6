"""The self-test zoo: planted derivative bugs, each with a correct twin.

Every entry of ``ZOO`` is a ``Planted(bug, twin, check, trigger)``:

- ``bug``: a fuzzdiff Target whose derivative (or forward) is wrong in one
  subtle way, and right whenever the single input property ``trigger`` is
  absent;
- ``twin``: the same target (name + "_twin") with the bug fixed: it must pass
  every check that applies to it;
- ``check``: the check that must find the bug;
- ``trigger``: the one input property that exposes it (one of TRIGGERS).

None of these targets is registered in the global catalog: ``fuzzdiff list``
and the fuzz suite never see them.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable

import torch
import torch.nn.functional as F
from torch.autograd import Function

from fuzzdiff.case.layout import Layout
from fuzzdiff.targets.discrepancies import (
    FUNCTION_JVP_DROPPED_AT_DUALS,
    FUNCTION_JVP_DROPPED_UNDER_COMPILED_JVP,
    NESTED_JVP_FUNCTION,
)
from fuzzdiff.targets.target import Target

__all__ = ["Planted", "ZOO", "TRIGGERS", "by_name"]

TRIGGERS = (
    "noncontiguous",   # some argument is not laid out contiguously (permuted, sliced, ...)
    "offset",          # some argument starts at a storage offset > 0
    "aliasing",        # two arguments share memory
    "nonsquare",       # a matrix argument with n != m
    "extreme",         # huge |x| among the values (target opts into specials)
    "float32",         # the case dtype is float32
    "second_order",    # only the derivative of the backward is wrong
    "second_order_forward",  # only the derivative of the jvp is wrong
    "forward_mode",    # only the forward-mode (jvp) formula is wrong
    "cotangent",       # the cotangent is not constant (all ones hides it)
    "mutation",        # a "functional" target writes into its input in some code path
    "channels_last",   # the forward is wrong for channels_last memory format
    "batch_dim",       # vmap batches an argument along a dim other than 0
    "batch_size",      # vmap batches more than one example
    "fake_kernel",     # a custom op's fake kernel is wrong: only compiled runs (and opcheck) call it
    "compiled",        # the bug is in code that only runs under torch.compile
    "recomputation",   # the bug is in a forward recomputed by torch.utils.checkpoint
    "zeros",           # an exact zero among the values (target opts into the "zeros" structure)
    "compiled_transform",  # only torch.compile of a torch.func transform (grad, vjp) runs the buggy code
)


@dataclass(frozen=True)
class Planted:
    bug: Target
    twin: Target
    check: str
    trigger: str
    note: str = ""

    @property
    def name(self) -> str:
        return self.bug.name


def _origin(name: str) -> str:
    """How records and ``fuzzdiff check`` name a zoo target (run from the repo root)."""
    return f"tests.selftest.zoo:TARGETS.{name}"


def _pair(name: str, bug: Callable, twin: Callable, spec: str, check: str, trigger: str,
          note: str, **target_kw) -> Planted:
    assert trigger in TRIGGERS, trigger
    # the zoo's bugs and twins are custom autograd.Functions (pytorch/pytorch#197867)
    target_kw = dict(target_kw, known=(*target_kw.get("known", ()), NESTED_JVP_FUNCTION))
    return Planted(Target(name, bug, spec, family="selftest", origin=_origin(name), **target_kw),
                   Target(name + "_twin", twin, spec, family="selftest", origin=_origin(name + "_twin"),
                          **target_kw),
                   check, trigger, note)


def _contiguous_strides(shape) -> tuple[int, ...]:
    return Layout.contiguous(tuple(shape)).strides


# ---------------------------------------------------------------------------------
# 1. noncontiguous: backward reads the saved input in storage order.
#    y = x sin x,  dy/dx = sin x + x cos x

def _d_xsinx(x):
    return torch.sin(x) + x * torch.cos(x)


class XSinX(Function):
    @staticmethod
    def forward(x):
        return x * torch.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * _d_xsinx(x)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * _d_xsinx(x)


class XSinXStorageOrder(XSinX):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        # BUG: "flat" re-view of x that assumes contiguous strides; it keeps the
        # storage offset, so it is right for every contiguous x, offset or not.
        flat = torch.as_strided(x, x.shape, _contiguous_strides(x.shape), x.storage_offset())
        return g * _d_xsinx(flat)


# ---------------------------------------------------------------------------------
# 2. noncontiguous: backward returns the gradient "in x's strides" with as_strided.
#    y = log(1 + x^2),  dy/dx = 2x / (1 + x^2)

def _d_log1psq(x):
    return 2 * x / (1 + x * x)


class Log1pSq(Function):
    @staticmethod
    def forward(x):
        return torch.log1p(x * x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * _d_log1psq(x)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * _d_log1psq(x)


class Log1pSqRestrided(Log1pSq):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        gx = (g * _d_log1psq(x)).contiguous()
        # BUG: meant to hand back a gradient with x's strides; as_strided
        # reinterprets the contiguous buffer instead of copying into that layout.
        return gx.as_strided(x.size(), x.stride())


# ---------------------------------------------------------------------------------
# 3. offset: backward rebuilds x from its storage with storage_offset=0.
#    y = atan(x),  dy/dx = 1 / (1 + x^2)

def _d_atan(x):
    return 1 / (1 + x * x)


class Atan(Function):
    @staticmethod
    def forward(x):
        return torch.atan(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * _d_atan(x)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * _d_atan(x)


class AtanStorageRebuild(Atan):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        # BUG: rebuilds x from its storage with its sizes and strides but
        # storage_offset=0: right for any layout that starts at the storage's start.
        xs = torch.as_strided(x, x.size(), x.stride(), 0)
        return g * _d_atan(xs)


# ---------------------------------------------------------------------------------
# 4. offset, in the forward: the output is rebuilt from x's storage with
#    storage_offset=0 (backward is right); found by comparing layouts.
#    y = sin(x)

class Sin(Function):
    @staticmethod
    def forward(x):
        return torch.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.cos(x)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * torch.cos(x)


class SinStorageRebuild(Sin):
    @staticmethod
    def forward(x):
        # BUG: hands the kernel x re-viewed from its storage with its sizes and
        # strides but storage_offset=0 (as_strided's default is x's own offset).
        return torch.sin(torch.as_strided(x, x.size(), x.stride(), 0))


# ---------------------------------------------------------------------------------
# 5. aliasing: a "same tensor twice" special case in backward.
#    y = a * b

class Mul(Function):
    @staticmethod
    def forward(a, b):
        return a * b

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return g * b, g * a

    @staticmethod
    def jvp(ctx, ta, tb):
        a, b = ctx.saved_tensors
        return ta * b + a * tb


class MulSquareShortcut(Mul):
    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        if a.data_ptr() == b.data_ptr() and a.stride() == b.stride():
            # BUG: "x * x, so d/dx = 2x" -- but autograd already adds up the
            # gradients of both uses of x: the result is doubled.
            return 2 * g * a, 2 * g * b
        return g * b, g * a


# ---------------------------------------------------------------------------------
# 6. aliasing: a per-call cache keyed on the storage, not on the view.
#    y = exp(a) - exp(b)

def exp_diff_cached(a, b):
    cache = {}

    def exp(t):
        # BUG: two different views of one storage share a key.
        key = (t.untyped_storage().data_ptr(), t.dtype)
        if key not in cache:
            cache[key] = torch.exp(t)
        return cache[key]

    return exp(a) - exp(b)


def exp_diff_cached_twin(a, b):
    cache = {}

    def exp(t):
        key = (t.untyped_storage().data_ptr(), t.dtype, t.storage_offset(),
               tuple(t.shape), t.stride())
        if key not in cache:
            cache[key] = torch.exp(t)
        return cache[key]

    return exp(a) - exp(b)


# ---------------------------------------------------------------------------------
# 7. non-square: attention scores q k^T / sqrt(d), backward scales by the wrong dim.

class Scores(Function):
    @staticmethod
    def forward(q, k):
        return q @ k.mT / math.sqrt(max(q.shape[-1], 1))

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx, g):
        q, k = ctx.saved_tensors
        scale = 1 / math.sqrt(max(q.shape[-1], 1))
        return g @ k * scale, g.mT @ q * scale

    @staticmethod
    def jvp(ctx, tq, tk):
        q, k = ctx.saved_tensors
        return (tq @ k.mT + q @ tk.mT) / math.sqrt(max(q.shape[-1], 1))


class ScoresRowScale(Scores):
    @staticmethod
    def backward(ctx, g):
        q, k = ctx.saved_tensors
        scale = 1 / math.sqrt(max(q.shape[0], 1))  # BUG: the number of rows, not the head dim
        return g @ k * scale, g.mT @ q * scale


# ---------------------------------------------------------------------------------
# 8. non-square: centering rows, backward divides by the wrong dimension's size.
#    y = X - mean(X, dim=1)

class CenterRows(Function):
    @staticmethod
    def forward(x):
        return x - x.mean(dim=1, keepdim=True)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.shape = inputs[0].shape

    @staticmethod
    def backward(ctx, g):
        return g - g.sum(dim=1, keepdim=True) / ctx.shape[1]

    @staticmethod
    def jvp(ctx, t):
        return t - t.mean(dim=1, keepdim=True)


class CenterRowsWrongCount(CenterRows):
    @staticmethod
    def backward(ctx, g):
        return g - g.sum(dim=1, keepdim=True) / ctx.shape[0]  # BUG: rows, not columns


# ---------------------------------------------------------------------------------
# 9. extreme values: softplus with a stable forward, backward exp(x) / (1 + exp(x)).

class Softplus(Function):
    @staticmethod
    def forward(x):
        return F.softplus(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.sigmoid(x)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * torch.sigmoid(x)


class SoftplusNaiveSigmoid(Softplus):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        e = torch.exp(x)
        return g * (e / (1 + e))  # BUG: inf / inf = nan for huge x


# ---------------------------------------------------------------------------------
# 10. extreme values: log cosh with a stable forward, backward sinh / cosh.

_LOG2 = math.log(2.0)


class LogCosh(Function):
    @staticmethod
    def forward(x):
        a = x.abs()
        return a + F.softplus(-2 * a) - _LOG2

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.tanh(x)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * torch.tanh(x)


class LogCoshNaiveTanh(LogCosh):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (torch.sinh(x) / torch.cosh(x))  # BUG: inf / inf = nan for huge |x|


# ---------------------------------------------------------------------------------
# 11. float32: x^2 with its derivative by the polarization identity, a difference
#     of two nearly equal large squares (exact enough in float64, not in float32).

_SHIFT = 1e6


class Square(Function):
    @staticmethod
    def forward(x):
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 2 * x

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * 2 * x


class SquarePolarization(Square):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        # BUG: 2x = ((x + s)^2 - (x - s)^2) / 2s loses every digit of x in float32
        return g * (((x + _SHIFT) ** 2 - (x - _SHIFT) ** 2) / (2 * _SHIFT))


# ---------------------------------------------------------------------------------
# 12. float32: a "fast path" that evaluates the derivative in bfloat16 unless the
#     input is float64.

class SinLowPrecisionBackward(Sin):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        if x.dtype == torch.float64:
            return g * torch.cos(x)
        return g * torch.cos(x.bfloat16()).to(x.dtype)  # BUG: 8 bits of mantissa


# ---------------------------------------------------------------------------------
# 13. second order: backward right, but part of it is detached, so its own
#     derivative (double backward) is wrong.   y = x exp(x),  dy/dx = (1 + x) exp(x)

class XExp(Function):
    @staticmethod
    def forward(x):
        return x * torch.exp(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (1 + x) * torch.exp(x)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * (1 + x) * torch.exp(x)


class XExpDetached(XExp):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        # BUG: exp(x) detached "to save memory": right values, wrong second derivative
        return g * (1 + x) * torch.exp(x).detach()


# ---------------------------------------------------------------------------------
# 14. forward mode: backward right, jvp formula wrong.
#     y = x sigmoid(x),  dy/dx = s (1 + x (1 - s))

def _d_silu(x):
    s = torch.sigmoid(x)
    return s * (1 + x * (1 - s))


class Silu(Function):
    @staticmethod
    def forward(x):
        return x * torch.sigmoid(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * _d_silu(x)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * _d_silu(x)


class SiluWrongJvp(Silu):
    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return t * s * (1 + x * s)  # BUG: s where (1 - s) belongs


# ---------------------------------------------------------------------------------
# 15. cotangent: backward written for loss.sum().backward(): it uses the mean
#     of grad_output, right only for a constant cotangent.   y = expm1(x)

class Expm1(Function):
    @staticmethod
    def forward(x):
        return torch.expm1(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.exp(x)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return t * torch.exp(x)


class Expm1MeanCotangent(Expm1):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g.mean() * torch.exp(x)  # BUG: one number for every element's cotangent


# ---------------------------------------------------------------------------------
# 16. mutation: backward uses the saved input's buffer as scratch space.
#     y = x tanh(x),  dy/dx = tanh x + x (1 - tanh^2 x)

class XTanh(Function):
    @staticmethod
    def forward(x):
        return x * torch.tanh(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        t = torch.tanh(x)
        return g * (t + x * (1 - t * t))

    @staticmethod
    def jvp(ctx, tx):
        (x,) = ctx.saved_tensors
        t = torch.tanh(x)
        return tx * (t + x * (1 - t * t))


class XTanhScratch(XTanh):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        t = torch.tanh(x)
        if torch.is_grad_enabled() or not x.is_contiguous():
            # recording a graph (double backward), or a strided x: out of place
            return g * (t + x * (1 - t * t))
        # BUG: "no graph is recorded, so reuse the buffer": right derivative,
        # but the buffer is the caller's input, which is now clobbered.
        return g * x.mul_(1 - t * t).add_(t)


# ---------------------------------------------------------------------------------
# 17. channels_last: a per-channel scale whose channels_last "fast path" forgets
#     to move channels last before flattening.   y[n, c, h, w] = x[n, c, h, w] s[c]

def channel_scale(x, s):
    n, c, h, w = x.shape
    if x.is_contiguous(memory_format=torch.channels_last):
        # BUG: a channels_last tensor is (N*H*W, C) in memory, but reshape
        # works on the logical NCHW order, so channels get mixed up.
        return (x.reshape(n * h * w, c) * s).reshape(n, c, h, w)
    return x * s.reshape(1, c, 1, 1)


def channel_scale_twin(x, s):
    n, c, h, w = x.shape
    if x.is_contiguous(memory_format=torch.channels_last):
        return (x.permute(0, 2, 3, 1).reshape(n * h * w, c) * s).reshape(n, h, w, c).permute(0, 3, 1, 2)
    return x * s.reshape(1, c, 1, 1)


# ---------------------------------------------------------------------------------
# 18. batch_dim: a custom vmap rule that assumes the batch dim is 0.
#     y = x - mean(x),  self-adjoint: dy = g - mean(g)

def _centered(x):
    return x - x.mean(-1, keepdim=True)


class Center(Function):
    @staticmethod
    def forward(x):
        return _centered(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return _centered(g)

    @staticmethod
    def jvp(ctx, t):
        return _centered(t)

    @staticmethod
    def vmap(info, in_dims, x):
        return _centered(x.movedim(in_dims[0], 0)), 0


class CenterBatchFirst(Center):
    @staticmethod
    def vmap(info, in_dims, x):
        # BUG: "the batch is dim 0"; with the batch last, the mean runs over it.
        return _centered(x), 0


# ---------------------------------------------------------------------------------
# 19. batch_dim: a custom vmap rule that returns the wrong out_dims.
#     y = sum of the rows of x

class RowSum(Function):
    @staticmethod
    def forward(x):
        return x.sum(0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.rows = inputs[0].shape[0]

    @staticmethod
    def backward(ctx, g):
        return g.unsqueeze(0).expand(ctx.rows, *g.shape)

    @staticmethod
    def jvp(ctx, t):
        return t.sum(0)

    @staticmethod
    def vmap(info, in_dims, x):
        d = in_dims[0] % x.dim()
        rows = 1 if d == 0 else 0  # where the examples' dim 0 is in the batched x
        return x.sum(rows), d - (rows < d)


class RowSumKeepsBatchDim(RowSum):
    @staticmethod
    def vmap(info, in_dims, x):
        d = in_dims[0] % x.dim()
        # BUG: "the output keeps the input's batch dim": not when the summed
        # dim comes before it.
        return x.sum(1 if d == 0 else 0), in_dims[0]


# ---------------------------------------------------------------------------------
# 20. batch_size: a custom vmap rule whose reduction runs over the whole batch.
#     y = x / sqrt(1 + |x|^2)

def _inv_norm(x, keep_batch: bool = True):
    s = (x * x).sum(-1, keepdim=True) if keep_batch else (x * x).sum()
    return torch.rsqrt(1 + s)


class SoftNormalize(Function):
    @staticmethod
    def forward(x):
        return x * _inv_norm(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        r = _inv_norm(x)
        return g * r - x * r**3 * (x * g).sum(-1, keepdim=True)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        r = _inv_norm(x)
        return t * r - x * r**3 * (x * t).sum(-1, keepdim=True)

    @staticmethod
    def vmap(info, in_dims, x):
        x = x.movedim(in_dims[0], 0)
        return x * _inv_norm(x), 0


class SoftNormalizeWholeBatch(SoftNormalize):
    @staticmethod
    def vmap(info, in_dims, x):
        x = x.movedim(in_dims[0], 0)
        return x * _inv_norm(x, keep_batch=False), 0  # BUG: one norm for all examples


# ---------------------------------------------------------------------------------

ZOO: list[Planted] = [
    _pair("xsinx_storage_order", XSinXStorageOrder.apply, XSinX.apply, "x: ...",
          "grad", "noncontiguous", "backward re-views x with contiguous strides"),
    _pair("log1psq_restrided_grad", Log1pSqRestrided.apply, Log1pSq.apply, "x: ...",
          "grad", "noncontiguous", "backward returns grad.as_strided(x.size(), x.stride())"),
    _pair("atan_offset0", AtanStorageRebuild.apply, Atan.apply, "x: ...",
          "grad", "offset", "backward rebuilds x with as_strided(..., storage_offset=0)"),
    _pair("sin_fwd_offset0", SinStorageRebuild.apply, Sin.apply, "x: ...",
          "layout", "offset", "forward re-views x with as_strided(..., storage_offset=0)"),
    _pair("mul_square_shortcut", MulSquareShortcut.apply, Mul.apply, "a: n m, b: n m",
          "alias", "aliasing", "backward special-cases a is b as x*x and doubles the gradient"),
    _pair("exp_diff_storage_cache", exp_diff_cached, exp_diff_cached_twin, "a: n, b: n",
          "alias", "aliasing", "forward caches exp per storage, not per view"),
    _pair("scores_row_scale", ScoresRowScale.apply, Scores.apply, "q: n d, k: n d",
          "grad", "nonsquare", "backward scales by 1/sqrt(rows) instead of 1/sqrt(d)"),
    _pair("center_rows_wrong_count", CenterRowsWrongCount.apply, CenterRows.apply, "x: n m",
          "grad", "nonsquare", "backward divides the row sum by n instead of m"),
    _pair("softplus_naive_sigmoid", SoftplusNaiveSigmoid.apply, Softplus.apply, "x: ...",
          "grad", "extreme", "backward exp(x)/(1+exp(x)) is nan for huge x", specials=True),
    _pair("logcosh_naive_tanh", LogCoshNaiveTanh.apply, LogCosh.apply, "x: ...",
          "grad", "extreme", "backward sinh(x)/cosh(x) is nan for huge |x|", specials=True),
    _pair("square_polarization", SquarePolarization.apply, Square.apply, "x: ...",
          "dtype", "float32", "backward 2x as a difference of squares of x +- 1e6"),
    _pair("sin_bf16_backward", SinLowPrecisionBackward.apply, Sin.apply, "x: ...",
          "dtype", "float32", "backward computes cos(x) in bfloat16 unless float64"),
    _pair("xexp_detached", XExpDetached.apply, XExp.apply, "x: ...",
          "gradgrad", "second_order", "backward detaches exp(x): double backward is wrong"),
    _pair("silu_wrong_jvp", SiluWrongJvp.apply, Silu.apply, "x: ...",
          "forward", "forward_mode", "jvp has s where (1 - s) belongs"),
    _pair("expm1_mean_cotangent", Expm1MeanCotangent.apply, Expm1.apply, "x: ...",
          "grad", "cotangent", "backward uses grad_output.mean()"),
    _pair("xtanh_scratch", XTanhScratch.apply, XTanh.apply, "x: ...",
          "mutation", "mutation", "backward computes in place in the saved input"),
    _pair("channel_scale_cl", channel_scale, channel_scale_twin, "x: n c h w, s: c",
          "layout", "channels_last", "channels_last fast path flattens NCHW order", min_side=2, max_side=3),
    _pair("center_batch_first", CenterBatchFirst.apply, Center.apply, "x: n",
          "vmap", "batch_dim", "custom vmap rule assumes the batch dim is 0"),
    _pair("rowsum_out_dims", RowSumKeepsBatchDim.apply, RowSum.apply, "x: n m",
          "vmap", "batch_dim", "custom vmap rule returns the input's batch dim as out_dims"),
    _pair("soft_normalize_whole_batch", SoftNormalizeWholeBatch.apply, SoftNormalize.apply, "x: n",
          "vmap", "batch_size", "custom vmap rule reduces over the whole batch"),
]


# ---------------------------------------------------------------------------------
# 21. fake_kernel: a custom op whose kernel writes its result column-major (as a
#     Fortran-order library would) and whose fake kernel says it is row-major.
#     Eager never calls the fake kernel; inductor plans its buffers by it.

def _column_major(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.mT.shape).mT  # strides (1, n) for an (n, m) result


def _scale_kernel(x: torch.Tensor) -> torch.Tensor:
    return _column_major(x).copy_(x * 2)


def _scale(name: str, fake):
    """The op, behind an autograd.Function with a backward and a jvp (a custom
    op's own autograd registration has no forward mode)."""
    op = torch.library.custom_op(f"fuzzdiff_zoo::{name}", _scale_kernel, mutates_args=())
    op.register_fake(fake)

    class Scale(Function):
        @staticmethod
        def forward(x):
            return op(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            return g * 2

        @staticmethod
        def jvp(ctx, t):  # forward AD wants the tangent in the output's (column-major) layout
            return _column_major(t).copy_(t * 2)
    return Scale.apply


scale_fake_row_major = _scale("scale_fake_row_major", lambda x: x.new_empty(x.shape))  # BUG
scale_fake_row_major_twin = _scale("scale_fake_row_major_twin", _column_major)


# ---------------------------------------------------------------------------------
# 22. compiled: a "compile-friendly" branch taken only while torch.compile traces,
#     with the tanh approximation of gelu where the exact gelu belongs.

_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def gelu_traced_branch(x):
    if torch.compiler.is_compiling():  # BUG: an approximation, off by up to ~5e-4
        return 0.5 * x * (1 + torch.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))
    return F.gelu(x)


def gelu_traced_branch_twin(x):
    if torch.compiler.is_compiling():
        return 0.5 * x * (1 + torch.erf(x / math.sqrt(2.0)))
    return F.gelu(x)


ZOO += [
    # known: compiled code drops the Function's jvp at dual inputs and under torch.func.jvp,
    # and the op has no forward rule
    _pair("scale_fake_row_major", scale_fake_row_major, scale_fake_row_major_twin, "x: n m",
          "compile", "fake_kernel", "the fake kernel says row-major; the kernel writes column-major",
          known=(FUNCTION_JVP_DROPPED_AT_DUALS, FUNCTION_JVP_DROPPED_UNDER_COMPILED_JVP)),
    _pair("gelu_traced_branch", gelu_traced_branch, gelu_traced_branch_twin, "x: ...",
          "compile", "compiled", "a branch taken only under torch.compile approximates gelu"),
]

# ---------------------------------------------------------------------------------
# 23. float32, forward mode: a float32 fast path in the jvp with a "fast sigmoid".
#     Reverse mode, and every float64 computation, is right.

class SoftplusFastSigmoidJvp(Softplus):
    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        if x.dtype == torch.float32:
            # BUG: x / (1 + |x|) is a sigmoid-shaped curve, not the sigmoid: up to ~7% off
            return t * 0.5 * (1 + x / (1 + x.abs()))
        return t * torch.sigmoid(x)


# ---------------------------------------------------------------------------------
# 24. float32, second order: a float32 backward that skips recording its graph.
#     y = x exp(x): first derivatives are right in every dtype.

class XExpFloat32NoGrad(XExp):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        if x.dtype == torch.float32:
            with torch.no_grad():  # BUG: "float32 is for inference": exp(x) is a constant to double backward
                e = torch.exp(x)
            return g * (1 + x) * e
        return g * (1 + x) * torch.exp(x)


# ---------------------------------------------------------------------------------
# 25. float32, vmap: the batched float32 path of a custom vmap rule takes the
#     inverse square root by the bit trick with one Newton step (up to 0.18% off);
#     the unbatched forward, and float64, use torch.rsqrt.

def _fast_rsqrt(s: torch.Tensor) -> torch.Tensor:
    y = (0x5F3759DF - (s.view(torch.int32) >> 1)).view(torch.float32)
    return y * (1.5 - 0.5 * s * y * y)


class SoftNormalizeFastRsqrt(SoftNormalize):
    @staticmethod
    def vmap(info, in_dims, x):
        x = x.movedim(in_dims[0], 0)
        if x.dtype != torch.float32:
            return x * _inv_norm(x), 0
        return x * _fast_rsqrt(1 + (x * x).sum(-1, keepdim=True)), 0  # BUG: not rsqrt


ZOO += [
    _pair("softplus_fast_sigmoid_jvp", SoftplusFastSigmoidJvp.apply, Softplus.apply, "x: ...",
          "forward", "float32", "float32 jvp uses x / (1 + |x|) for the sigmoid"),
    _pair("xexp_float32_no_grad", XExpFloat32NoGrad.apply, XExp.apply, "x: ...",
          "gradgrad", "float32", "float32 backward computes exp(x) under no_grad: double backward is wrong"),
    _pair("soft_normalize_fast_rsqrt", SoftNormalizeFastRsqrt.apply, SoftNormalize.apply, "x: n",
          "vmap", "float32", "float32 vmap rule takes rsqrt by the bit trick (0x5f3759df)"),
]

# ---------------------------------------------------------------------------------
# 26. recomputation: stochastic depth (a residual branch dropped at random while
#     training, the kept one scaled by 2) with its coin drawn from Python's random.
#     torch.utils.checkpoint restores torch's generators for the forward it
#     recomputes during the backward, not Python's: the recomputation draws another
#     coin, and the gradient is that of another block than the one whose output it
#     is (the scale is a tensor, saved for the backward: non-reentrant checkpoint,
#     which keeps the first forward's graph, recomputes it too). The twin draws the coin from torch's default generator. Both declare
#     random=True: every other check calls them with their generators seeded alike.

def _residual(x):
    return x * torch.tanh(x)


def drop_path_python_random(x):
    # BUG: Python's random, which checkpoint does not restore
    scale = torch.tensor(2.0 if random.random() >= 0.5 else 0.0, dtype=x.dtype, device=x.device)
    return x + _residual(x) * scale


def drop_path_python_random_twin(x):
    scale = (torch.rand(()) >= 0.5).to(x) * 2
    return x + _residual(x) * scale


ZOO += [
    _pair("drop_path_python_random", drop_path_python_random, drop_path_python_random_twin, "x: ...",
          "checkpoint", "recomputation", "stochastic depth draws its coin from Python's random, which "
          "checkpoint's recomputation does not restore", random=True),
]

# ---------------------------------------------------------------------------------
# 27. zeros: cumprod along the last dim, backward by the quotient out / x
#     (reverse cumsum of g * out, divided by x): right wherever x has no zero,
#     nan at an exact zero, where cumprod is as smooth as anywhere. The twin
#     takes the exclusive products prod_{i <= k, i != j} x_i, no division.

def _exclusive_products(x):
    """``c[..., j, k] = prod_{i <= k, i != j} x_i`` for ``k >= j``, else 0."""
    n = x.shape[-1]
    eye = torch.eye(n, dtype=torch.bool, device=x.device)
    rows = torch.where(eye, torch.ones_like(x).unsqueeze(-2), x.unsqueeze(-2).expand(*x.shape[:-1], n, n))
    return rows.cumprod(-1) * torch.ones(n, n, dtype=x.dtype, device=x.device).triu()


class CumprodLast(Function):
    @staticmethod
    def forward(x):
        return torch.cumprod(x, -1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x, output)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, g):
        x, _ = ctx.saved_tensors
        return (_exclusive_products(x) * g.unsqueeze(-2)).sum(-1)

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return (_exclusive_products(x) * t.unsqueeze(-1)).sum(-2)


class CumprodLastQuotient(CumprodLast):
    @staticmethod
    def backward(ctx, g):
        x, out = ctx.saved_tensors
        # BUG: divides by x, which is 0 at a zero (0 / 0 there).
        return (g * out).flip(-1).cumsum(-1).flip(-1) / x


ZOO += [
    _pair("cumprod_quotient_grad", CumprodLastQuotient.apply, CumprodLast.apply, "x: *b n",
          "grad", "zeros", "backward divides the reverse cumsum of g * out by x: nan at an exact zero",
          structured=("zeros",)),
]


# ---------------------------------------------------------------------------------
# 28. second order, forward mode: the jvp is right, but part of it is detached,
#     so the derivative of the jvp (forward mode's second derivative) is wrong.
#     y = x exp(x): backward and double backward are right.

class XExpJvpDetached(XExp):
    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        # BUG: exp(x) detached "to save memory": right tangent, wrong derivative of it
        return t * (1 + x) * torch.exp(x).detach()


ZOO += [
    _pair("xexp_jvp_detached", XExpJvpDetached.apply, XExp.apply, "x: ...",
          "forward2", "second_order_forward", "jvp detaches exp(x): its own derivative is wrong"),
]


# ---------------------------------------------------------------------------------
# 29. compiled_transform: an "inference fast path" taken under torch.compile when
#     x does not require grad, which computes sin under no_grad. Traced inside
#     torch.func.grad or vjp, x does not require grad either: the Function's
#     backward is dropped and the gradient is zero. Every eager run is right, and
#     so is compile(f) differentiated outside (x requires grad there), and forward
#     AD (no_grad does not stop tangents).

class SinVmapRule(Sin):
    generate_vmap_rule = True


def sin_no_grad_fast_path(x):
    if torch.compiler.is_compiling() and not x.requires_grad:
        with torch.no_grad():  # BUG: "no gradient is wanted here", but torch.func wants one
            return torch.sin(x)
    return SinVmapRule.apply(x)


def sin_no_grad_fast_path_twin(x):
    if torch.compiler.is_compiling() and not x.requires_grad:
        return torch.sin(x)  # the plain op: autograd and torch.func differentiate it
    return SinVmapRule.apply(x)


ZOO += [
    _pair("sin_no_grad_fast_path", sin_no_grad_fast_path, sin_no_grad_fast_path_twin, "x: ...",
          "compile", "compiled_transform",
          "a fast path under torch.compile for inputs that do not require grad runs under no_grad: "
          "compile(grad(f)) drops the Function's backward"),
]

# Every bug and twin by name: ``fuzzdiff check tests.selftest.zoo:TARGETS.atan_offset0``.
TARGETS = SimpleNamespace(**{t.name: t for p in ZOO for t in (p.bug, p.twin)})


def by_name(name: str) -> Planted:
    for p in ZOO:
        if p.name == name or p.twin.name == name:
            return p
    raise KeyError(name)
