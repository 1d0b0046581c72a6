"""Shape and layout ops: views, copies and rearrangements of values.

Their derivatives are all exact permutations, sums or selections, so these
are mostly about memory: views of views, stride-0 and overlapping windows
(unfold, expand), and gradients that must land at the right positions.
"""

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from fuzzdiff.targets import FromShapes, Mask, Target, register
from fuzzdiff.targets.catalog import _kw
from fuzzdiff.targets.discrepancies import EAGER_CHECKS
from fuzzdiff.targets.known import Known

FAMILY = "shape"


def reshape(x, shape):
    return torch.reshape(x, shape)


def permute(x, dims):
    return torch.permute(x, dims)


def expand(x, size):
    return x.expand(size)


def narrow(x, span):
    return torch.narrow(x, *span)


def unfold(x, window):
    return x.unfold(*window)


def cat(x, y, z):
    return torch.cat([x, y, z], dim=-1)


def stack(x, y, dim):
    return torch.stack([x, y], dim)


def where(c, x, y):
    return torch.where(c, x, y)


def clamp(x, bounds):
    return torch.clamp(x, *bounds)


def flip(x, dims):
    return torch.flip(x, dims)


def roll(x, shifts, dims):
    return torch.roll(x, shifts, dims)


def transpose(x, dim0, dim1):
    return torch.transpose(x, dim0, dim1)


def squeeze(x, dim):
    return torch.squeeze(x, dim)


def unsqueeze(x, dim):
    return torch.unsqueeze(x, dim)


def repeat(x, repeats):
    return x.repeat(repeats)


def split(x, size, dim):
    return torch.split(x, size, dim)


def tril(x, diagonal):
    return torch.tril(x, diagonal)


def diagonal(x, offset):
    return torch.diagonal(x, offset, -2, -1)


def sort(x, dim, descending):
    return torch.sort(x, dim=dim, descending=descending).values


def pad(x, pad, mode):
    return F.pad(x, pad, mode)


def movedim(x, source, destination):
    return torch.movedim(x, source, destination)


def repeat_interleave(x, repeats, dim):
    return torch.repeat_interleave(x, repeats, dim)


ROLL_SCALAR_VMAP = Known(
    "vmap",
    "vmap of torch.roll(x, shifts) without dims on 0-dim examples rolls across the batch "
    "(silently wrong values), where each example's roll is the identity (torch 2.13.0 CPU; "
    "rank >= 1 examples are right)",
    "s = torch.tensor([1., 2., 3.]); torch.func.vmap(lambda a: torch.roll(a, 1))(s) -> "
    "tensor([3., 1., 2.]), torch.stack([torch.roll(a, 1) for a in s]) -> tensor([1., 2., 3.])",
    features=("0:rank0",),
    records=("3214ab70f1038e18",),
)
SQUEEZE_SCALAR_VMAP = Known(
    ("vmap", "forward2"),
    "vmap of torch.squeeze(x, -1) on 0-dim examples raises while eager torch.squeeze("
    "torch.tensor(1.), -1) returns the scalar (torch 2.13.0 CPU; dim=0 works under vmap); "
    "forward2's torch.func.hessian and jacfwd(jacfwd) vmap it too",
    "torch.func.vmap(lambda a: torch.squeeze(a, -1))(torch.tensor([1., 2., 3.])) -> "
    "IndexError: Dimension is out of range (expected to be in range of [-1, 0], but got [-1]",
    raises="RuntimeError",
    message=r"Dimension is out of range \(expected to be in range of \[-1, 0\]",
    features=("0:rank0",),
    records=("7b67c8fb783e4256", "ee1f57cbf24e442b"),
)
SQUEEZE_SCALAR_VMAP_COMPILED = Known(
    "compile",
    "the same vmap batching rule as SQUEEZE_SCALAR_VMAP, reached by the compile check's vmap "
    "transform: the traced vmap raises as eager vmap does (torch 2.13.0 CPU)",
    "aot_function(torch.func.vmap(lambda a: torch.squeeze(a, -1)), nop, nop)(torch.tensor([1., 2.])) -> "
    "RuntimeError: Dimension is out of range (expected to be in range of [-1, 0], but got [-1]",
    raises="RuntimeError",
    message=r"Dimension is out of range \(expected to be in range of \[-1, 0\]",
    features=("0:rank0",),
    params={"transform": "vmap"},
    records=("f129f0070b84fa3c",),
)
CLAMP_BROADCAST = Known(
    (*EAGER_CHECKS, "compile"),
    "the backward of torch.clamp(x, min, max) with tensor bounds raises when x is smaller than "
    "the broadcast shape and min or max requires grad (torch 2.13.0 CPU; the forward and "
    "forward-mode AD work). Every check runs a backward, so each raises",
    "x = torch.rand(1, dtype=torch.float64); lo = (torch.rand(2, dtype=torch.float64) - 1.2)"
    ".requires_grad_(); hi = torch.rand(1, dtype=torch.float64) + 0.2; torch.clamp(x, lo, hi)"
    ".sum().backward() -> RuntimeError: output with shape [1] doesn't match the broadcast shape "
    "[2] (also x (3, 1), lo (3, 3), hi (3, 1) with only hi requiring grad)",
    raises="RuntimeError",
    message=r"output with shape \[[\d, ]*\] doesn't match the broadcast shape",
    records=(
        "7ebad3fdcb8a4d46",
        "bec2a76a0a7578f2",
        "1c2b70e3e623e6de",
        "e544e834e21f9d54",
        "b638ef04207a5a4e",
        "230f726fdcb8a2df",
        "2029008803594165",
    ),
    fixed_in="2.14.1",
)


# Empty complex results, whose cotangent came expanded (a stride-0 tensor of
# no elements counts as contiguous, so .contiguous() keeps its strides)
VIEW_AS_REAL_EMPTY_EXPANDED = Known(
    ("grad", "forward", "gradgrad", "forward2", "layout", "alias", "mutation", "dtype", "vmap", "checkpoint"),
    "the backward of torch.view_as_real raises at an empty tensor whose cotangent is expanded "
    "(stride 0): its rule view_as_complex(grad.contiguous()) keeps the strides, since an empty "
    "tensor counts as contiguous, and view_as_complex wants a last dim of stride 1 (torch 2.13.0 "
    "and 2.15.0 CPU; a contiguous empty cotangent, or an expanded non-empty one, works; no upstream "
    "report found)",
    "re = torch.zeros(0, 2, dtype=torch.float64, requires_grad=True); im = torch.zeros_like(re, "
    "requires_grad=True); out = torch.view_as_real(torch.complex(re, im)); torch.autograd.grad(out, "
    "(re, im), torch.ones((), dtype=torch.float64).expand(out.shape)) -> RuntimeError: Tensor must "
    "have a last dimension with stride 1",
    raises="RuntimeError",
    message=r"Tensor must have a last dimension with stride 1",
    params={"cotangent.layout": "expanded"},
    features=("empty",),
    records=("7b5da0b1551edf64",),
)


def complex_as_real(re, im):
    return torch.view_as_real(torch.complex(re, im))


register(
    Target(
        "view_as_real",
        complex_as_real,
        "re: *b, im: *b",
        FAMILY,
        op="torch.view_as_real",
        known=(VIEW_AS_REAL_EMPTY_EXPANDED,),
    ),
    Target("reshape", reshape, "x: ...", FAMILY, kwargs={"shape": _kw.reshape_sizes()}),
    Target("flatten", torch.flatten, "x: ...", FAMILY),
    Target("permute", permute, "x: _ ...", FAMILY, kwargs={"dims": _kw.permutation()}),
    Target("transpose", transpose, "x: _ ...", FAMILY, kwargs={"dim0": _kw.dim(), "dim1": _kw.dim()}),
    Target("movedim", movedim, "x: _ ...", FAMILY, kwargs={"source": _kw.dim(), "destination": _kw.dim()}),
    Target(
        "squeeze",
        squeeze,
        "x: ...",
        FAMILY,
        max_side=2,
        kwargs={"dim": _kw.dim()},
        known=(SQUEEZE_SCALAR_VMAP, SQUEEZE_SCALAR_VMAP_COMPILED),
    ),
    Target("unsqueeze", unsqueeze, "x: ...", FAMILY, kwargs={"dim": _kw.dim(extra=1)}),
    Target("expand", expand, "x: ...", FAMILY, max_side=2, kwargs={"size": _kw.expand_sizes()}),
    Target(
        "repeat",
        repeat,
        "x: ...",
        FAMILY,
        max_side=3,
        kwargs={
            "repeats": FromShapes(lambda s: st.lists(st.integers(0, 2), min_size=len(s["x"]), max_size=len(s["x"]) + 1))
        },
    ),
    Target(
        "repeat_interleave",
        repeat_interleave,
        "x: _ ...",
        FAMILY,
        max_side=3,
        kwargs={"repeats": st.integers(0, 3), "dim": _kw.dim()},
    ),
    Target("narrow", narrow, "x: _ ...", FAMILY, kwargs={"span": _kw.span()}),
    Target("unfold", unfold, "x: _ ...", FAMILY, kwargs={"window": _kw.window()}),
    Target("split", split, "x: _ ...", FAMILY, kwargs={"size": st.integers(1, 3), "dim": _kw.dim()}),
    Target("cat", cat, "x: *b n, y: *b m, z: *b k", FAMILY, max_side=3),
    Target("stack", stack, "x: *b, y: *b", FAMILY, kwargs={"dim": _kw.dim(extra=1)}),
    Target("where", where, "c: *#b, x: *#b, y: *#b", FAMILY, kinds={"c": Mask()}),
    Target(
        "clamp",
        clamp,
        "x: ...",
        FAMILY,
        kinks=(-0.5, 0.5),
        kwargs={"bounds": st.sampled_from([[-0.5, 0.5], [-0.5, None], [None, 0.5]])},
    ),
    # x == lo or x == hi are kinks; only the values' own grid could tie them
    Target(
        "clamp_tensor", torch.clamp, "x: *b, lo: *#b, hi: *#b", FAMILY, sample={"lo": (-2.0, -0.1), "hi": (0.1, 2.0)}
    ),
    # the same, with x broadcast too (the output is larger than x)
    Target(
        "clamp_tensor_broadcast",
        torch.clamp,
        "x: *#b, lo: *#b, hi: *#b",
        FAMILY,
        sample={"lo": (-2.0, -0.1), "hi": (0.1, 2.0)},
        known=(CLAMP_BROADCAST,),
    ),
    Target("flip", flip, "x: _ ...", FAMILY, kwargs={"dims": _kw.dims()}),
    Target(
        "roll",
        roll,
        "x: ...",
        FAMILY,
        kwargs={
            "shifts": st.integers(-3, 3),
            "dims": FromShapes(lambda s: st.one_of(st.none(), _kw.dim().fn(s)) if s["x"] else st.none()),
        },
        known=(ROLL_SCALAR_VMAP,),
    ),
    Target("tril", tril, "x: *b n m", FAMILY, max_side=3, kwargs={"diagonal": st.integers(-2, 2)}),
    Target("diagonal", diagonal, "x: *b n m", FAMILY, max_side=3, kwargs={"offset": st.integers(-2, 2)}),
    Target(
        "sort",
        sort,
        "x: _ ...",
        FAMILY,
        distinct=True,
        structured=("ties",),
        kwargs={"dim": _kw.dim(), "descending": st.booleans()},
    ),
    Target(
        "pad",
        pad,
        "x: *b n m",
        FAMILY,
        max_side=3,
        kwargs={
            "pad": st.sampled_from([2, 4]).flatmap(lambda n: st.lists(st.integers(0, 2), min_size=n, max_size=n)),
            "mode": st.just("constant"),
        },
    ),
)
