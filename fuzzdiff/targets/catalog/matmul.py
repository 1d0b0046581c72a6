"""Matrix products: shared contraction dims named in the spec, batch dims broadcast."""

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from fuzzdiff.targets import Target, register

FAMILY = "matmul"
SCALES = st.sampled_from([1.0, 0.5, -2.0])


def einsum_batched(x, y):
    return torch.einsum("...ij,jk->...ik", x, y)


def einsum_bilinear(x, a, y):
    return torch.einsum("bi,ij,bj->b", x, a, y)


register(
    Target("mm", torch.mm, "x: n k, y: k m", FAMILY),
    Target("bmm", torch.bmm, "x: b n k, y: b k m", FAMILY, max_side=3),
    Target("matmul", torch.matmul, "x: *#b n k, y: *#b k m", FAMILY, max_side=3),
    Target("matmul_vector", torch.matmul, "x: *b n k, y: k", FAMILY, max_side=3),
    Target("mv", torch.mv, "x: n k, y: k", FAMILY),
    Target("dot", torch.dot, "x: n, y: n", FAMILY),
    Target("outer", torch.outer, "x: n, y: m", FAMILY),
    Target("einsum", einsum_batched, "x: *b i j, y: j k", FAMILY, max_side=3),
    Target("einsum_bilinear", einsum_bilinear, "x: b i, a: i j, y: b j", FAMILY, max_side=3),
    Target("addmm", torch.addmm, "c: #n #m, x: n k, y: k m", FAMILY, kwargs={"beta": SCALES, "alpha": SCALES}),
    Target(
        "baddbmm",
        torch.baddbmm,
        "c: #b #n #m, x: b n k, y: b k m",
        FAMILY,
        max_side=3,
        kwargs={"beta": SCALES, "alpha": SCALES},
    ),
    Target("linear", F.linear, "x: *b k, w: m k, bias: m", FAMILY, max_side=3),
)
