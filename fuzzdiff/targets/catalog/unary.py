"""Unary elementwise ops, each with the domain where it is smooth.

``domain`` is where the op is defined and smooth; values are drawn from inside
it, a margin away from a finite edge (strategies.values.sampling_interval).
``kinks`` lists points where the op is not differentiable (or has a pole, or a
jump in a higher derivative that gradgrad would see); values keep away from them.
"""

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from fuzzdiff.targets import Target, register
from fuzzdiff.targets.discrepancies import DUAL_INDUCTOR_NO_TANGENTS
from fuzzdiff.targets.known import Known

FAMILY = "unary"

LOGSIGMOID_NESTED_VMAP_CUDA = Known(
    "vmap",
    "F.logsigmoid under two levels of vmap raises on CUDA, in the forward pass already: the CUDA "
    "kernel's unused buffer is a 1-d empty tensor (at::empty({0})), which the nested batching "
    "rule cannot handle (torch 2.11.0+cu130, H100; one level of vmap and the CPU both work; related: "
    "pytorch/pytorch#84892, intel/torch-xpu-ops#2373, the same buffer on XPU)",
    "x = torch.randn(2, 3, dtype=torch.float64, device='cuda'); "
    "torch.func.vmap(torch.func.vmap(F.logsigmoid))(x) -> RuntimeError: SmallVector unable to grow. "
    "Requested capacity (18446744073709551615) is larger than maximum value for size type (4294967295)",
    raises="RuntimeError",
    message=r"SmallVector unable to grow",
    features=("device:cuda",),
    params={"composition": "vmap_vmap"},
    records=("0c33744c03107c7e",),
)
POSITIVE = {"x": (0.0, None)}
OPEN_UNIT = {"x": (-1.0, 1.0)}


def polygamma(x, n):
    return torch.polygamma(n, x)


register(
    # exponentials and logarithms
    Target("exp", torch.exp, "x: ...", FAMILY, specials=True),
    Target("expm1", torch.expm1, "x: ...", FAMILY),
    Target("log", torch.log, "x: ...", FAMILY, domain=POSITIVE),
    Target("log1p", torch.log1p, "x: ...", FAMILY, domain={"x": (-1.0, None)}),
    Target("log2", torch.log2, "x: ...", FAMILY, domain=POSITIVE),
    Target("sqrt", torch.sqrt, "x: ...", FAMILY, domain=POSITIVE),
    Target("rsqrt", torch.rsqrt, "x: ...", FAMILY, domain=POSITIVE),
    # 1/x has a pole at 0: keep away from it on both sides
    Target("reciprocal", torch.reciprocal, "x: ...", FAMILY, kinks=(0.0,)),
    Target("square", torch.square, "x: ...", FAMILY),
    # trigonometric and hyperbolic
    # known: the evidence of a discrepancy of inductor's, whatever the op
    Target("sin", torch.sin, "x: ...", FAMILY, known=(DUAL_INDUCTOR_NO_TANGENTS,)),
    Target("cos", torch.cos, "x: ...", FAMILY),
    Target("tan", torch.tan, "x: ...", FAMILY, domain={"x": (-1.5, 1.5)}),
    Target("asin", torch.asin, "x: ...", FAMILY, domain=OPEN_UNIT),
    Target("acos", torch.acos, "x: ...", FAMILY, domain=OPEN_UNIT),
    Target("atan", torch.atan, "x: ...", FAMILY),
    Target("sinh", torch.sinh, "x: ...", FAMILY),
    Target("tanh", torch.tanh, "x: ...", FAMILY),
    Target("atanh", torch.atanh, "x: ...", FAMILY, domain=OPEN_UNIT),
    # special functions
    Target("sigmoid", torch.sigmoid, "x: ...", FAMILY),
    Target("logit", torch.logit, "x: ...", FAMILY, domain={"x": (0.0, 1.0)}),
    Target("erf", torch.erf, "x: ...", FAMILY),
    Target("erfinv", torch.erfinv, "x: ...", FAMILY, domain=OPEN_UNIT),
    # lgamma, digamma, polygamma have poles at 0, -1, -2, ...
    Target("lgamma", torch.lgamma, "x: ...", FAMILY, domain=POSITIVE),
    Target("digamma", torch.digamma, "x: ...", FAMILY, domain=POSITIVE),
    Target("polygamma", polygamma, "x: ...", FAMILY, domain=POSITIVE, kwargs={"n": st.integers(1, 2)}),
    # piecewise: kinks where the pieces meet
    Target("abs", torch.abs, "x: ...", FAMILY, kinks=(0.0,)),
    Target("relu", torch.relu, "x: ...", FAMILY, kinks=(0.0,)),
    Target(
        "leaky_relu",
        F.leaky_relu,
        "x: ...",
        FAMILY,
        kinks=(0.0,),
        kwargs={"negative_slope": st.sampled_from([0.01, 0.2, 1.5])},
    ),
    # elu is C1 at 0 for alpha=1 but its second derivative jumps there
    Target("elu", F.elu, "x: ...", FAMILY, kinks=(0.0,), kwargs={"alpha": st.sampled_from([1.0, 0.5])}),
    Target("hardtanh", F.hardtanh, "x: ...", FAMILY, kinks=(-1.0, 1.0)),
    # smooth activations
    Target("softplus", F.softplus, "x: ...", FAMILY, kwargs={"beta": st.sampled_from([1.0, 2.0])}),
    Target("silu", F.silu, "x: ...", FAMILY),
    Target("gelu", F.gelu, "x: ...", FAMILY, kwargs={"approximate": st.sampled_from(["none", "tanh"])}),
    Target("logsigmoid", F.logsigmoid, "x: ...", FAMILY, known=(LOGSIGMOID_NESTED_VMAP_CUDA,)),
)
