"""Binary (and ternary) elementwise ops with broadcasting.

Specs use broadcast dims so both operands are drawn with the same rank where
any dim may be 1 in either (``*#b``), or with a trailing operand of lower rank
(``*#b #n`` against ``#n``): the backward has to sum the gradient back over
broadcast dims, the classic place for a missing reduction.
"""

import torch
from hypothesis import strategies as st

from fuzzdiff.targets import Target, register
from fuzzdiff.targets.discrepancies import JVP_TANGENT_COPY_DYNAMIC
from fuzzdiff.targets.known import Known

FAMILY = "binary"
SAME_RANK = "x: *#b, y: *#b"
TRAILING = "x: *#b #n, y: #n"
ADDCDIV_JVP_FLOAT64_TANGENT = Known(
    "compile",
    "torch.compile of torch.func.jvp(torch.addcdiv) at 0-dim float32 arguments returns a float64 "
    "output tangent (torch 2.13.0 CPU, aot_eager, dynamic True or False; eager and aot_function "
    "return float32)",
    "a, b, c = (torch.tensor(v) for v in (0.5, 1.5, -2.0)); torch.compile(lambda *p: "
    "torch.func.jvp(lambda a, b, c: torch.addcdiv(a, b, c, value=1.0), p[:3], p[3:]), "
    "backend='aot_eager')(a, b, c, a, b, c)[1].dtype -> torch.float64, eager torch.float32",
    message=r"jvp\(f\)\(u\) vs eager: tangent \d+: dtype torch\.float64 \(eager: torch\.float32\)",
    params={"backend": ("aot_eager", "inductor"), "transform": "jvp"},
    dtypes=("float32",),
    records=("12f18fe50f18f059",),
)
ADDCDIV_VMAP_SYMFLOAT_VALUE = Known(
    "compile",
    "inductor with dynamic=True fails to lower vmap(torch.addcdiv) over 0-dim float32 tensor1 and "
    "tensor2 when value is a float held in a dict that a closure passes as keywords: dynamo makes it "
    "a SymFloat (an item() of a traced tensor), and the decomposition of the _to_copy that casts it "
    'to float32 asserts "x must be Tensor or scalar, got SymFloat" (torch 2.13.0 CPU; eager vmap, '
    "aot_eager, dynamic=False, float64, a literal value, rank-1 tensor1 or tensor2 and addcmul work)",
    "def make(kwargs): return lambda a, b, c: torch.addcdiv(a, b, c, **kwargs); def batched(f): "
    "return lambda a, b, c: torch.func.vmap(f)(a, b, c); g = batched(make({'value': 1.0})); a, b, c = "
    "torch.tensor([1.75, -0.5]), torch.tensor([1.75, 0.25]), torch.tensor([2.75, 1.0]); g(a, b, c) "
    "works; torch.compile(g, backend='inductor', dynamic=True)(a, b, c) -> BackendCompilerFailed: "
    "backend='inductor' raised: AssertionError: x must be Tensor or scalar, got SymFloat",
    raises="BackendCompilerFailed",
    message=r"AssertionError: x must be Tensor or scalar, got SymFloat",
    features=("1:rank0", "2:rank0"),
    params={"backend": "inductor", "transform": "vmap"},
    dtypes=("float32",),
    records=("1b22a5e38ab20261",),
)
POW_INT_EXPONENT_TRANSFORM = Known(
    "compile",
    "the same int exponent under torch.compile(dynamic=True) of a torch.func transform of "
    'torch.pow: "false INTERNAL ASSERT FAILED at c10/core/Scalar.h" (NYI SymInt equality) in '
    "fake-tensor dispatch of the traced backward. It takes an int held in a dict that a closure "
    "passes as keywords (as the check passes a case's kwargs): dynamo makes it a SymInt; a literal "
    "exponent compiles (torch 2.13.0 CPU, aot_eager; pytorch/pytorch#185715's kind)",
    "def make(kwargs): return lambda d: torch.pow(d, **kwargs); def make_g(f): return lambda x, v: "
    "torch.func.grad(lambda d: (v * f(d)).sum())(x); g = make_g(make({'exponent': 2})); x, v = "
    "torch.tensor(1.5, dtype=torch.float64), torch.tensor(0.5, dtype=torch.float64); g(x, v) -> "
    "tensor(1.5); torch.compile(g, backend='aot_eager', dynamic=True)(x, v) -> TorchRuntimeError: "
    "... false INTERNAL ASSERT FAILED at c10/core/Scalar.h ... NYI SymInt equality (a literal "
    "exponent=2, or g a module-level lambda, compiles)",
    raises="TorchRuntimeError",
    message=r"Scalar\.h",
    params={"backend": ("aot_eager", "inductor"), "transform": ("grad", "vjp", "jvp", "vmap")},
    records=("2dbfb9bf761c30cd",),
    fixed_in="2.14.1",
)
POW_INT_EXPONENT_DYNAMIC = Known(
    "compile",
    "under torch.compile(dynamic=True) a Python-int exponent of torch.pow becomes a symbolic "
    "Scalar, and pow_backward's exponent.equal(0.0) hits an internal assert (torch 2.13.0 CPU, "
    "pytorch/pytorch#185715; float exponents and dynamic=False work)",
    "x = torch.tensor(1.5, dtype=torch.float64, requires_grad=True); kwargs = {'exponent': 2}; "
    "torch.compile(lambda t: torch.pow(t, **kwargs), backend='aot_eager', dynamic=True)(x)"
    ".backward() -> BackendCompilerFailed: RuntimeError: false INTERNAL ASSERT FAILED at "
    "c10/core/Scalar.h: NYI SymInt equality",
    raises="BackendCompilerFailed",
    message=r"NYI SymInt equality",
    params={"backend": ("aot_eager", "inductor")},
    records=("199a65d6276cffc9",),
    fixed_in="2.14.1",
)

register(
    Target("add", torch.add, SAME_RANK, FAMILY, kwargs={"alpha": st.sampled_from([1.0, -0.5, 2.0])}),
    Target("sub", torch.sub, TRAILING, FAMILY, kwargs={"alpha": st.sampled_from([1.0, 3.0])}),
    Target("mul", torch.mul, SAME_RANK, FAMILY),
    # the quotient has a pole at y = 0: both operands keep away from 0
    Target("div", torch.div, SAME_RANK, FAMILY, kinks=(0.0,)),
    Target("pow", torch.pow, TRAILING, FAMILY, domain={"x": (0.0, None)}),
    Target(
        "pow_scalar",
        torch.pow,
        "x: ...",
        FAMILY,
        domain={"x": (0.0, None)},
        kwargs={"exponent": st.sampled_from([2, 3, 0.5, -1.5, 0])},
        known=(POW_INT_EXPONENT_DYNAMIC, POW_INT_EXPONENT_TRANSFORM),
    ),
    # atan2 jumps across y = 0 for x < 0 and hypot has a cone at the origin
    Target("atan2", torch.atan2, SAME_RANK, FAMILY, kinks=(0.0,), known=(JVP_TANGENT_COPY_DYNAMIC,)),
    Target("hypot", torch.hypot, TRAILING, FAMILY, kinks=(0.0,)),
    Target("maximum", torch.maximum, SAME_RANK, FAMILY, distinct=True),
    Target("minimum", torch.minimum, TRAILING, FAMILY, distinct=True),
    Target("xlogy", torch.xlogy, SAME_RANK, FAMILY, domain={"y": (0.0, None)}),
    Target("logaddexp", torch.logaddexp, SAME_RANK, FAMILY),
    Target("lerp", torch.lerp, "x: *#b, y: *#b, w: *#b", FAMILY),
    Target("addcmul", torch.addcmul, "x: *#b, y: *#b, z: *#b", FAMILY, kwargs={"value": st.sampled_from([1.0, -0.5])}),
    Target(
        "addcdiv",
        torch.addcdiv,
        "x: *#b, y: *#b, z: *#b",
        FAMILY,
        domain={"z": (0.0, None)},
        kwargs={"value": st.sampled_from([1.0, 2.0])},
        known=(ADDCDIV_JVP_FLOAT64_TANGENT, ADDCDIV_VMAP_SYMFLOAT_VALUE),
    ),
)
