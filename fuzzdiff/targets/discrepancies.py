"""Torch discrepancies that targets of several families hit, declared once.

A catalog target and an OpInfo target of the same op reach the same torch bug;
each lists the one signature here among its ``known`` (fuzzdiff.targets.known).
"""

from __future__ import annotations

import dataclasses

from fuzzdiff.targets.known import NOT_NONE, Known

__all__ = [
    "EAGER_CHECKS",
    "OWN_RULES",
    "LAYER_NORM_JACREV",
    "NESTED_VMAP_LOSSES",
    "NESTED_VMAP_LOSSES_CAPTURED_TARGET",
    "GROUP_NORM_VMAP_GAPPED_BATCH",
    "DET_GRAD_TRANSPOSED_PERMUTED",
    "DET_GRAD_TRANSPOSED_STRIDE0",
    "NESTED_JVP_LINALG",
    "NESTED_JVP_NORMS",
    "REVERSE_OVER_FORWARD_INPLACE",
    "NESTED_JVP_FUNCTION",
    "DUAL_INDUCTOR_NO_TANGENTS",
    "JVP_TANGENT_COPY_DYNAMIC",
    "JVP_STRIDE0_AOT_FUNCTION",
    "FUNCTION_JVP_DROPPED_AT_DUALS",
    "JVP_VIEW_AOT_FUNCTION",
    "JVP_CAPTURED_CONSTANT_AOT_FUNCTION",
    "VMAP_INT_SCALAR_DYNAMIC",
    "VMAP_SYMBOLIC_SIZES_DYNAMIC",
    "VMAP_UPSAMPLE_SYMINT_OUTPUT_SIZE",
    "DUAL_LEVEL_LERP_INPLACE_COMPILE",
    "BCE_WITH_LOGITS_NESTED_JVP",
    "GROUP_NORM_COMPILED_AUTOGRAD_ORDER2",
    "VECTOR_NORM_ORD0_COMPILED_AUTOGRAD",
    "STRICT_EXPORT_EMPTY_STRIDED",
    "STRICT_EXPORT_UNREGISTERED_PARAMETER",
    "EXPORT_DIM_SOLVER_NEGATIVE_POWER",
    "MSE_LOSS_CONSTANT_TARGET_ZEROTENSOR",
    "MACHINERY",
    "LAYER_NORM_COMPILED_AUTOGRAD_BIAS_ALIASED",
    "INDUCTOR_UNBATCHED_CONV2D_DYNAMIC",
]

# The checks that run a target eagerly, forward and backward, on the case's own
# values: a torch bug in an op's forward or backward kernel meets every one of them.
EAGER_CHECKS = (
    "grad",
    "forward",
    "gradgrad",
    "forward2",
    "layout",
    "alias",
    "mutation",
    "dtype",
    "device",
    "checkpoint",
)

NESTED_VMAP_MESSAGE = (
    r"The size of tensor a \(\d+\) must match the size of tensor b \(\d+\)"
    r"|shape '\[\d+, \d+\]' is invalid for input of size \d+"
)


NESTED_VMAP_SHAPE = r"vmapped vs a loop over the batch: output \d+: shape \[[\d, ]*\] vs \[[\d, ]*\]"


def _nested_vmap_loss(unbatched: int, batched: int, **known) -> Known:
    """Nested vmap of a regression loss with argument ``unbatched`` not batched
    at the inner level (batched at the outer one or not at all) and
    ``batched`` batched there."""
    return Known(
        "vmap",
        message=NESTED_VMAP_MESSAGE,
        raises="RuntimeError",
        params={
            "composition": "vmap_vmap",
            f"levels.1.in_dims.{unbatched}": None,
            f"levels.1.in_dims.{batched}": NOT_NONE,
        },
        **known,
    )


def _nested_vmap_loss_one_example(unbatched: int, batched: int, **known) -> Known:
    """The same, where the inner batch has one example: no error, an output
    of the wrong shape (the loss's out= resize broadcasts instead of raising),
    or an IndexError where vmap then moves the batch dim the output lacks."""
    return Known(
        "vmap",
        params={
            "composition": "vmap_vmap",
            f"levels.1.in_dims.{unbatched}": None,
            f"levels.1.in_dims.{batched}": NOT_NONE,
            "levels.1.batch": 1,
        },
        **known,
    )


NESTED_VMAP_LOSSES = (
    _nested_vmap_loss(
        1,
        0,
        reason="nested vmap of F.mse_loss, F.smooth_l1_loss and F.huber_loss raises when the "
        "target is not batched at the inner level and the input is (torch 2.13.0 CPU; whether "
        "or not the target is batched at the outer level; F.l1_loss, one level, or both batched "
        "at both levels work)",
        evidence="x = torch.randn(2, 3, 4, dtype=torch.float64); y = torch.randn(2, 4, "
        "dtype=torch.float64); torch.func.vmap(torch.func.vmap(F.mse_loss, in_dims=(0, None)))"
        "(x, y) -> RuntimeError: The size of tensor a (12) must match the size of tensor b (4) "
        "at non-singleton dimension 1, where the loop torch.stack([torch.stack([F.mse_loss("
        "x[i, j], y[i]) for j in range(3)]) for i in range(2)]) works",
        records=("1673357661b54a8b", "88cf21f6d1983335", "872e38faf23f0852", "eeef7772eea56ec6"),
    ),
    _nested_vmap_loss(
        0,
        1,
        reason="the same losses under nested vmap raise too the other way round: the *input* "
        "not batched at the inner level and the target batched there (torch 2.13.0 CPU; "
        "F.l1_loss works)",
        evidence="x = torch.randn(1, dtype=torch.float64); y = torch.randn(1, 2, "
        "dtype=torch.float64); torch.func.vmap(torch.func.vmap(F.mse_loss, in_dims=(None, 0)))"
        "(x, y) -> RuntimeError: shape '[1, 1]' is invalid for input of size 2 (with trailing "
        "dims of size 2: The size of tensor a (2) must match the size of tensor b (4)); the loop "
        "over both batches works",
        records=("3e90340a8de4bb31",),
    ),
    *(
        _nested_vmap_loss_one_example(
            unbatched,
            batched,
            reason=f"where the inner batch has one example, the same losses do not raise: the output "
            f"lacks the inner batch dim ({what} not batched at the inner level), a wrong shape, or an "
            "IndexError where vmap moves that dim (torch 2.13.0 CPU; the loss's out= resize warns 'An "
            "output with one or more elements was resized')",
            evidence="x = torch.randn(1, 1, dtype=torch.float64); t = torch.randn(1, 1, dtype=torch.float64); "
            "torch.func.vmap(lambda tt: torch.func.vmap(lambda xx: F.huber_loss(xx, tt, reduction='none'))(x))"
            "(t).shape -> (1, 1), where the loop over both batches gives (1, 1, 1); with out_dims=1 "
            "at the inner level: IndexError: Dimension out of range",
            **shown,
        )
        for unbatched, batched, what in ((1, 0, "the target"), (0, 1, "the input"))
        for shown in (
            {"message": NESTED_VMAP_SHAPE},
            {"raises": "IndexError", "message": r"Dimension out of range \(expected to be in range of"},
        )
    ),
)

# A loss module's target that the module's call captures (ModuleInfo's forward
# inputs hold it as a constant) is never batched: the first signatures above,
# with the input batched at the inner level and no second argument to ask.
NESTED_VMAP_LOSSES_CAPTURED_TARGET = tuple(
    dataclasses.replace(k, params={key: v for key, v in k.params.items() if key != "levels.1.in_dims.1"})
    for k in NESTED_VMAP_LOSSES
    if k.params.get("levels.1.in_dims.1", NOT_NONE) is None
)

GROUP_NORM_VMAP_GAPPED_BATCH = Known(
    "vmap",
    "vmap of F.group_norm raises for a batched input whose batch dim leaves gaps between the "
    "examples, where the loop over the batch works (torch 2.13.0 CPU)",
    "w, b = torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64); xs = "
    "torch.randn(21, dtype=torch.float64).as_strided((2, 1, 3), (18, 6, 1)); "
    "torch.func.vmap(lambda t: F.group_norm(t, 1, w, b))(xs) -> RuntimeError: Expected "
    "X.is_contiguous(memory_format) to be true, but got false.; torch.stack([F.group_norm(t, 1, "
    "w, b) for t in xs]) works",
    raises="RuntimeError",
    message=r"Expected X\.is_contiguous\(memory_format\) to be true",
    params={"batched_layouts.0": NOT_NONE},
    records=("0a6a9784f9686a93", "ce660369f65928bc"),
    fixed_in="2.14.1",
)

DET_GRAD_TRANSPOSED_PERMUTED = Known(
    "compile",
    "inductor returns the transposed gradient of torch.linalg.det and torch.logdet when their "
    "input is an intermediate that eager makes column-major but inductor allocates row-major: "
    "_linalg_det factors A^T for a contiguous A, and the traced backward picks lu_solve's "
    "adjoint from eager's strides (torch 2.13.0 CPU; dynamic True or False; aot_eager is right)",
    "s = torch.randn(3, 5, 5, dtype=torch.float64); x = torch.zeros(3, 5, 5, "
    "dtype=torch.float64).mT.contiguous().mT.requires_grad_(); f = lambda x: "
    "torch.linalg.det(x + s) (or torch.logdet(x + s) with x + s of positive determinant); "
    "torch.autograd.grad(torch.compile(f, backend='inductor')(x).sum(), x)[0] equals "
    "torch.autograd.grad(f(x).sum(), x)[0].mT, not the eager gradient",
    message=r"^inductor vs eager: grad \d+ at",
    features=("0:permuted",),
    params={"backend": "inductor"},
    records=("7be19fad1ff85290", "3e9251956d1c9e22"),
)

DET_GRAD_TRANSPOSED_STRIDE0 = Known(
    "compile",
    "aot_function (either partitioner) returns the transposed gradient of det, slogdet and "
    "logdet for a stride-0 leaf (torch 2.13.0 CPU; eager and contiguous leaves are right)",
    "x = torch.tensor([.3, -.2], dtype=torch.float64).as_strided((1, 2, 2), (1, 0, 1))"
    ".requires_grad_(); f = lambda a: torch.linalg.slogdet(a + 2 * torch.eye(2, dtype=a.dtype))[1]; "
    "torch.autograd.grad(aot_function(f, fw_compiler=nop, bw_compiler=nop)(x).sum(), x)[0] is "
    "[[.4286, .0476], [-.0714, .5476]], eager [[.4286, -.0714], [.0476, .5476]] (det, logdet too)",
    message=r"^aot_function(_min_cut)? vs eager: grad \d+ at",
    features=("0:stride0",),
    params={"backend": ("aot_function", "aot_function_min_cut")},
    records=("fdd5a62c47c7c49f",),
)

# forward2's identities that differentiate a jvp formula itself; it judges
# them only after its other identities passed (fuzzdiff.checks.forward2)
_DIFFERENTIATED_JVP = r"^<w, d2f\[u, u'\]> (forward-over-forward|reverse-over-forward|jacfwd\(jacfwd\)) vs finite"

NESTED_JVP_LINALG = Known(
    "forward2",
    "the forward-mode formulas of torch.linalg.solve (so solve_ex and tensorsolve), torch.linalg.det, "
    "torch.logdet and torch.linalg.slogdet are not differentiable themselves: nested torch.func.jvp (and "
    "jacfwd(jacfwd), and reverse mode through their jvp) give wrong second derivatives, zero for "
    "logdet and slogdet, whose tangent does not even require grad, while reverse over reverse, "
    "forward over reverse and torch.func.hessian are right (torch 2.13.0 CPU)",
    "A = torch.randn(3, 3, dtype=torch.float64) + 3 * torch.eye(3, dtype=torch.float64); "
    "u, v = torch.randn(3, 3, dtype=torch.float64), torch.randn(3, 3, dtype=torch.float64); "
    "f = torch.logdet; torch.func.jvp(lambda a: torch.func.jvp(f, (a,), (u,))[1], (A,), (v,))[1] "
    "-> 0.0, (torch.func.hessian(f)(A) * u[:, :, None, None] * v).sum() -> -0.50; "
    "with f = lambda a: torch.linalg.solve(a, B).sum() the nested jvp differs from "
    "f = lambda a: (torch.linalg.inv(a) @ B).sum()'s, which agrees with the Hessian",
    message=_DIFFERENTIATED_JVP,
    records=("dcb1fd77467ad534",),
    fixed_in="2.15.0",
)

NESTED_JVP_NORMS = Known(
    "forward2",
    "the forward-mode formulas of F.layer_norm and of F.instance_norm and F.batch_norm(training=True) "
    "(native_batch_norm with batch statistics) are not differentiable themselves: nested "
    "torch.func.jvp and reverse mode through their jvp give wrong second derivatives, while "
    "reverse over reverse and forward over reverse are right (torch 2.13.0 CPU)",
    "x = torch.randn(2, 3, 4, dtype=torch.float64); u, v = torch.randn_like(x), "
    "torch.randn_like(x); f = lambda t: F.layer_norm(t, (4,)).sum(); "
    "torch.func.jvp(lambda a: torch.func.jvp(f, (a,), (u,))[1], (x,), (v,))[1] -> -30.9 "
    "(same for F.instance_norm), where the exact value is 0 (the normalized values sum to 0) "
    "and reverse over reverse gives 0",
    message=_DIFFERENTIATED_JVP,
    records=("ab2d94c598f988cc",),
)

LAYER_NORM_JACREV = Known(
    "forward2",
    "torch.func.jacrev (vmap over vjp) of F.layer_norm with respect to the weight gives a "
    "gradient whose derivative with respect to the input is wrong: the batched backward is "
    "differentiated with the saved mean and rstd held constant, so torch.func.hessian and "
    "jacrev(jacrev) give a diagonal d2f/dx dw, while jacrev(grad(f, argnums=1)), autograd's "
    "double backward and finite differences agree on the full block (torch 2.13.0 CPU); found "
    "at a normalized dim of one value, where the block is exactly zero and hessian gives rstd "
    "(316, 1 / sqrt(eps))",
    "x, w, c = torch.randn(3, 3, dtype=torch.float64); f = lambda x, w: (F.layer_norm(x, (3,), w) "
    "* c).sum(); torch.func.hessian(f, argnums=(0, 1))(x, w)[1][0] is diagonal, "
    "torch.func.jacrev(torch.func.grad(f, argnums=1))(x, w) is a full matrix that matches finite "
    "differences",
    message=r"^<w, d2f\[u, u'\]> (hessian|jacrev\(jacrev\)) vs finite differences",
    records=("a4f6812538ffdc59",),
)

REVERSE_OVER_FORWARD_INPLACE = Known(
    "forward2",
    "reverse mode through the jvp of F.log_softmax (so F.cross_entropy), F.softmax (so F.softmin "
    "and the torch.masked variants), torch.logsumexp, "
    "torch.logcumsumexp and torch.linalg.vector_norm(ord=1) (so F.normalize(p=1)) raises: their "
    "forward-mode formulas modify a saved exp or sign in place (torch 2.13.0 CPU; the jvp itself, "
    "nested torch.func.jvp and reverse over reverse work)",
    "x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True); with fwAD.dual_level(): "
    "t = fwAD.unpack_dual(torch.logsumexp(fwAD.make_dual(x, torch.randn_like(x)), 1)).tangent; "
    "torch.autograd.grad(t.sum(), x) -> RuntimeError: one of the variables needed for gradient "
    "computation has been modified by an inplace operation: [torch.DoubleTensor [2, 3]], which "
    "is output 0 of Exp, is at version 1",
    raises="RuntimeError",
    message=r"modified by an inplace operation: \[torch\.\w+ \[[\d, ]*\]\], which is output 0 of (Exp|Sgn),",
    records=("3d7a62e1556a7fac",),
)

NESTED_JVP_FUNCTION = Known(
    "forward2",
    "nested torch.func.jvp (and jacfwd(jacfwd)) through a custom autograd.Function with a "
    "correct jvp returns zero for the Function's second derivatives, while reverse over forward "
    "(which differentiates the same jvp) and torch.func.hessian are right "
    "(pytorch/pytorch#197867, torch 2.13.0 CPU); forward2 names the Function in these "
    "identities, and judges them after reverse over forward has passed",
    "class Sq(torch.autograd.Function): forward(x) = x * x, setup_context saves x with "
    "ctx.save_for_forward, jvp(ctx, t) = 2 * x * t; x, u, v = torch.randn(3).double(), "
    "torch.randn(3).double(), torch.randn(3).double(); torch.func.jvp(lambda a: "
    "torch.func.jvp(Sq.apply, (a,), (u,))[1], (x,), (v,))[1] -> zeros, instead of 2 * u * v",
    message=r"^<w, d2f\[u, u'\]> (forward-over-forward|jacfwd\(jacfwd\)) through a custom autograd\.Function vs finite",
    records=("ac57422b98e8d611",),
)

DUAL_INDUCTOR_NO_TANGENTS = Known(
    "compile",
    "a function compiled by inductor and called on forward-AD dual tensors returns outputs "
    "without tangents, silently (torch 2.13.0 CPU, dynamic True or False; eager, aot_eager and "
    "aot_function give the tangents; pytorch/pytorch#187284). Whatever the op: the compile check "
    "does not draw its dual transform with inductor, and this record keeps the evidence",
    "x, u = torch.randn(4, dtype=torch.float64), torch.randn(4, dtype=torch.float64); with "
    "fwAD.dual_level(): fwAD.unpack_dual(torch.compile(torch.sin, backend='inductor')"
    "(fwAD.make_dual(x, u))).tangent -> None, eager: u * cos(x)",
    message=r"^inductor, f at dual inputs vs eager: tangent \d+: no tangent \(eager: a tangent\)",
    params={"backend": "inductor", "transform": "dual"},
    records=("6d6a651c6ad2a21d",),
    fixed_in="2.14.1",
)

JVP_TANGENT_COPY_DYNAMIC = Known(
    "compile",
    "torch.compile(dynamic=True) of torch.func.jvp raises when a tangent's layout differs from "
    "its primal's (a primal at a storage offset, transposed or sliced, with a contiguous tangent; "
    "or a contiguous primal with an expanded, stride-0 tangent): make_dual copies the tangent into "
    "the primal's layout, and under fake tensors that copy calls storage_offset() on symbolic sizes "
    "(torch 2.13.0 CPU, aot_eager and inductor; dynamic=False, aot_function, and a tangent in the "
    "primal's layout work). Found on atan2, index_select, group_norm and OpInfo's H; whatever the "
    "op: the compile check does not draw its jvp transform on those backends for such a primal, "
    "and draws its direction contiguous",
    "s = torch.randn(3, dtype=torch.float64); u = torch.randn(2, dtype=torch.float64); "
    "torch.compile(lambda x, u: torch.func.jvp(torch.sin, (x,), (u,)), backend='aot_eager', "
    "dynamic=True)(s[1:], u) -> TorchRuntimeError: ... Cannot call storage_offset() on tensor "
    "with symbolic sizes/strides (also for torch.randn(2, 3).t() or torch.randn(4)[::2]); and for "
    "x = torch.randn(2, 2, dtype=torch.float64) with u = torch.randn(1, 2, dtype=torch.float64)"
    ".expand(2, 2)",
    raises="TorchRuntimeError",
    message=r"Cannot call storage_offset\(\) on tensor with symbolic sizes/strides",
    params={"backend": ("aot_eager", "inductor"), "transform": "jvp"},
    records=("24d9f3ea9bd3057c", "2def52e7055c03dd", "e70f8f832ad6b467", "261104657dbf429a", "01b21163f051b2cc"),
    fixed_in="2.14.1",
)

JVP_STRIDE0_AOT_FUNCTION = Known(
    "compile",
    "aot_function of torch.func.jvp raises when a primal has stride 0 and is not a view (a storage "
    "of its own, larger than one element) while its tangent, in the very same sizes, strides, "
    "offset and storage size, is a view: the traced make_dual copies the tangent into the "
    "primal's layout, an overlapping write that the functionalized copy_ refuses (torch 2.13.0 "
    "CPU; eager torch.func.jvp works, and so does aot_function when both are views). Found on "
    "OpInfo's __getitem__ and addr; whatever the op: the compile check does not draw jvp with "
    "aot_function for such a case",
    "from functorch.compile import aot_function, nop; x = torch.empty(0, dtype=torch.float64)"
    ".set_(torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64).untyped_storage(), 0, (5,), (0,)); "
    "u = torch.tensor([2.0, 0.0, 0.0], dtype=torch.float64).as_strided((5,), (0,)); g = lambda x, "
    "u: torch.func.jvp(torch.sin, (x,), (u,)); g(x, u)[1] -> [1.7552] * 5; aot_function(g, nop, "
    "nop)(x, u) -> RuntimeError: more than one element of the written-to tensor refers to a "
    "single memory location, from make_dual -> meta_copy_ (records a5f3e44a73adaec0, "
    "opinfo/__getitem__@15, and 7322b2a4ab40536b, opinfo/addr@0)",
    raises="RuntimeError",
    message=r"more than one element of the written-to tensor refers to a single memory location",
    features=("stride0",),
    params={"backend": ("aot_function", "aot_function_min_cut"), "transform": "jvp"},
    records=("a5f3e44a73adaec0", "7322b2a4ab40536b"),
    fixed_in="2.14.1",
)

FUNCTION_JVP_DROPPED_AT_DUALS = Known(
    "compile",
    "code compiled by aot_eager or aot_function and called on forward-AD dual tensors ignores a "
    "custom autograd.Function's jvp and differentiates its forward instead; when the forward "
    "calls a torch.library custom op (no forward-mode rule) the outputs come back without "
    "tangents, silently (torch 2.13.0 CPU; eager uses the jvp, and so does torch.func.jvp "
    "compiled whole by aot_eager)",
    "op = torch.library.custom_op('repro::double', lambda x: x * 2, mutates_args=()) (fake: "
    "empty_like); class D(torch.autograd.Function) with forward(x): return op(x), backward g * 2, "
    "jvp(ctx, t): return t * 2; with fwAD.dual_level(): fwAD.unpack_dual(torch.compile(D.apply, "
    "backend='aot_eager')(fwAD.make_dual(x, u))).tangent -> None, eager 2 * u (with a plain "
    "forward x * 2 and jvp t * 3, compiled gives 2 * u, eager 3 * u)",
    message=r"f at dual inputs vs eager: tangent \d+: no tangent \(eager: a tangent\)",
    params={"backend": ("aot_eager", "aot_function", "aot_function_min_cut"), "transform": "dual"},
    records=("a21a436aec8ab3b1",),
    fixed_in="2.14.1",
)

FUNCTION_JVP_DROPPED_UNDER_COMPILED_JVP = Known(
    "compile",
    "torch.compile of torch.func.jvp over a custom autograd.Function inlines the Function's "
    "forward and drops its jvp: the tangent is the forward's own, silently; where the forward "
    "calls a torch.library custom op (no forward-mode rule) it is zero (torch 2.13.0 and 2.15.0 "
    "CPU, every backend, eager included; upstream: pytorch/pytorch#192985, open)",
    "@torch.library.custom_op('repro::double', mutates_args=()) def op(x: Tensor) -> Tensor: "
    "return x * 2 (fake: empty_like); class D(torch.autograd.Function) with forward(x): return "
    "op(x), backward g * 2, jvp(ctx, t): return t * 2; x, u = torch.arange(1., 4.).double(), "
    "torch.ones(3).double(); torch.func.jvp(D.apply, (x,), (u,))[1] -> [2, 2, 2]; "
    "torch.compile(lambda a, b: torch.func.jvp(D.apply, (a,), (b,)), backend='eager')(x, u)[1] -> "
    "[0, 0, 0] (aot_eager and inductor alike)",
    message=r"jvp\(f\)\(u\) vs eager: tangent \d+",
    params={"transform": "jvp"},
    records=("04d94920cdca6817",),
)

JVP_VIEW_AOT_FUNCTION = Known(
    "compile",
    "aot_function of torch.func.jvp through a view op raises an internal assert when a primal "
    "does not span its whole storage (one element of a two-element storage; a (1, 1, 1) tensor "
    "with strides (1, 1, 1) in three): torch 2.13.0 CPU; eager, and a primal with a storage of "
    "its own, work. Found on avg_pool1d and take_along_dim; whatever the op with a view inside: "
    "the compile check does not draw jvp with aot_function for such a case",
    "x = torch.randn(2, dtype=torch.float64).as_strided((1,), (1,)); u = torch.randn(1, "
    "dtype=torch.float64); aot_function(lambda x, u: torch.func.jvp(lambda t: "
    "t.unsqueeze(0).squeeze(0) * 2, (x,), (u,)), nop, nop)(x, u) -> RuntimeError: "
    "!this_view_meta->has_fw_view() INTERNAL ASSERT FAILED; with x = torch.randn(1) it works",
    raises="RuntimeError",
    message=r"has_fw_view\(\) INTERNAL ASSERT FAILED",
    params={"backend": ("aot_function", "aot_function_min_cut"), "transform": "jvp"},
    records=("e238f0bcd32ec8af", "3c85d34d33d26cde"),
)

JVP_CAPTURED_CONSTANT_AOT_FUNCTION = Known(
    "compile",
    "aot_function of forward-mode AD (torch.func.jvp, or fwAD.make_dual inside the traced "
    "function) fails an internal assert when a tensor the function captures, not one of its "
    "inputs, meets a dual: native::_fw_primal (VariableMethodStubs.cpp) or native::_make_dual "
    "(AutogradComposite.cpp) is reached outside inference mode, and the captured tensor is left "
    "unusable by autograd for the rest of the process (torch 2.13.0 CPU; eager works). OpInfo "
    "targets in near mode add the sample's own tensor, a captured constant, to the fuzzed one, "
    "whatever the op; ModuleInfo's losses hold their target so, and its norms their running "
    "statistics",
    "from functorch.compile import aot_function, nop; C = torch.randn(2, 2, dtype=torch.float64); "
    "x, u = torch.randn(2, 2, dtype=torch.float64), torch.randn(2, 2, dtype=torch.float64); "
    "aot_function(lambda a, b: torch.func.jvp(lambda t: t + C, (a,), (b,))[1], nop, nop)(x, u) -> "
    "RuntimeError: InferenceMode::is_enabled() && self.is_inference() INTERNAL ASSERT FAILED at "
    "VariableMethodStubs.cpp:66 ... native::_fw_primal; a second call then fails at "
    "AutogradComposite.cpp:23 (native::_make_dual)",
    raises="RuntimeError",
    message=r"INTERNAL ASSERT FAILED at \S*(VariableMethodStubs|AutogradComposite)\.cpp",
    params={"backend": ("aot_function", "aot_function_min_cut"), "transform": ("jvp", "dual")},
    records=("ac0126a18a8ffea5", "a7516a05e18fc3f3", "3236bd1cd48c2d1e"),
)

VMAP_INT_SCALAR_DYNAMIC = Known(
    "compile",
    "torch.compile(dynamic=True) of vmap(torch.addbmm) or vmap(torch.baddbmm) with OpInfo's int beta "
    'and alpha (1, held in a dict that a closure passes as keywords) trips "false INTERNAL ASSERT '
    'FAILED at c10/core/Scalar.h" (NYI SymInt equality) in fake-tensor dispatch: dynamo makes the '
    "ints SymInts (torch 2.13.0 CPU, aot_eager and inductor; eager vmap, dynamic=False, float beta "
    "and alpha, literal keywords and the op without vmap compile; pow_scalar's "
    "pytorch/pytorch#185715 kind)",
    "def make(kwargs): return lambda m, a, b: torch.baddbmm(m, a, b, **kwargs); def batched(f): "
    "return lambda m, a, b: torch.func.vmap(f)(m, a, b); g = batched(make({'beta': 1, 'alpha': "
    "1})); m, a, b = (torch.randn(2, *s, dtype=torch.float64) for s in ((5, 5, 10), (5, 5, 5), (5, "
    "5, 10))); g(m, a, b) works; torch.compile(g, backend='aot_eager', dynamic=True)(m, a, b) -> "
    "TorchRuntimeError: ... **{'beta': s22, 'alpha': s34}): got RuntimeError('false INTERNAL "
    "ASSERT FAILED at c10/core/Scalar.h ... NYI SymInt equality'); with {'beta': 0.6, 'alpha': "
    "0.2} it compiles (torch.addbmm with m of shape (2, 5, 10) the same)",
    raises="TorchRuntimeError",
    message=r"INTERNAL ASSERT FAILED at \S*Scalar\.h.*NYI SymInt equality",
    params={"backend": ("aot_eager", "inductor"), "transform": "vmap"},
    records=("9c7ab91229f4fc98", "81c226c14fc476c3"),
    fixed_in="2.14.1",
)

VMAP_SYMBOLIC_SIZES_DYNAMIC = Known(
    "compile",
    "torch.compile(dynamic=True) of vmap(torch.cov), vmap(torch.corrcoef) (which calls cov) and "
    "vmap(torch.kron), vmap(torch.take_along_dim), vmap(torch.linalg.multi_dot), vmap(F.group_norm) and vmap of "
    "torch.linalg.norm at zero fail in fake-tensor dispatch: their C++ "
    "kernels call sizes() on a "
    "BatchedTensor over a FakeTensor with symbolic sizes (torch 2.13.0 CPU, aot_eager and inductor; "
    "eager vmap, dynamic=False and the ops without vmap work)",
    "f = lambda x: torch.func.vmap(torch.corrcoef)(x); x = torch.randn(2, 2, 3, dtype=torch.float64); "
    "f(x) works; torch.compile(f, backend='aot_eager', dynamic=True)(x) -> TorchRuntimeError: ... "
    "BatchedTensor(lvl=1, bdim=0, value=FakeTensor(..., size=(s33, s50, s69)) ... Cannot call sizes() "
    "on tensor with symbolic sizes/strides; the same for torch.cov, and for torch.kron at a, b = "
    "torch.randn(2, 5, 5), torch.randn(2, 10, 20), and for vmap(lambda t: torch.take_along_dim(t, i, "
    "dim=-1)) at x = torch.randn(2, 1, 2), i = torch.zeros(1, 1, dtype=torch.int64)",
    raises="TorchRuntimeError",
    message=r"BatchedTensor\(lvl=\d+.*Cannot call sizes\(\) on tensor with symbolic sizes/strides",
    params={"backend": ("aot_eager", "inductor"), "transform": "vmap"},
    records=(
        "be46eeeb0a46d2d9",
        "e95b172100d04d25",
        "0532fdf45dc26da4",
        "9d61123d3cfe46de",
        "38a3d55b8f0ad5e4",
        "9fe2afb0ea0287b0",
        "c3d200f15955c72e",
    ),
    fixed_in="2.14.1",
)

VMAP_UPSAMPLE_SYMINT_OUTPUT_SIZE = Known(
    "compile",
    "torch.compile(dynamic=True) of vmap(F.interpolate) with scale_factor and "
    "recompute_scale_factor=True (modes linear, nearest, bilinear, bicubic and trilinear; "
    "F.upsample_bilinear and F.upsample_nearest call it so) trips "
    '"isIntList() INTERNAL ASSERT FAILED at ivalue_inl.h ... Expected IntList but got GenericList" '
    "in fake-tensor dispatch: interpolate computes the output size from the symbolic input sizes, and "
    "functorch's batching kernel for upsample_*.vec takes output_size as int[] (OptionalArrayRef<long>), "
    "so unboxing the list of SymInts asserts (torch 2.13.0 CPU, aot_eager and inductor, a literal "
    "scale_factor too; eager vmap, dynamic=False, the op without vmap and mode nearest-exact work; "
    "without recompute_scale_factor the kernel calls sizes() instead, VMAP_SYMBOLIC_SIZES_DYNAMIC)",
    "def make(kwargs): return lambda t: F.interpolate(t, **kwargs); f = make({'size': None, "
    "'scale_factor': 0.6, 'mode': 'bicubic', 'align_corners': None, 'recompute_scale_factor': True}); "
    "g = lambda x: torch.func.vmap(f)(x); x = torch.randn(2, 2, 3, 4, 4, dtype=torch.float64); g(x) "
    "works; torch.compile(g, backend='aot_eager', dynamic=True)(x) -> TorchRuntimeError: ... got "
    "RuntimeError('isIntList() INTERNAL ASSERT FAILED at \"/__w/pytorch/pytorch/aten/src/ATen/core/"
    "ivalue_inl.h\":1981, please report a bug to PyTorch. Expected IntList but got GenericList'); the "
    "same with mode 'trilinear' at x = torch.randn(2, 2, 3, 4, 4, 4, dtype=torch.float64), and with "
    "'linear', 'nearest' and 'bilinear'",
    raises="TorchRuntimeError",
    message=r"BatchedTensor\(lvl=\d+.*isIntList\(\) INTERNAL ASSERT FAILED at \S*ivalue_inl\.h\S*, please report "
    r"a bug to PyTorch\. Expected IntList but got GenericList",
    params={"backend": ("aot_eager", "inductor"), "transform": "vmap"},
    records=("963ae4c69564e70b", "5ba54b5fec566ebe"),
    fixed_in="2.14.1",
)

DUAL_LEVEL_LERP_INPLACE_COMPILE = Known(
    "compile",
    "torch.compile of code that calls Tensor.lerp_ with a tensor weight inside an active "
    "fwAD.dual_level() (at dual inputs, under torch.func.jvp, or even on plain tensors there) fails "
    "in fake-tensor dispatch: lerp_'s meta calls the aten.lerp overload packet, which formats a "
    "tensor's repr (with Tensor.__repr__ patched it works), and Tensor.__repr__ inside a dual level "
    "calls unpack_dual, which reaches the native::_fw_primal stub outside inference mode: "
    '"InferenceMode::is_enabled() && self.is_inference() INTERNAL ASSERT FAILED at '
    'VariableMethodStubs.cpp". torch.quantile and '
    "torch.nanquantile with interpolation 'linear' or 'midpoint' call lerp_ so (torch 2.13.0 CPU; "
    "dynamo's eager backend, aot_eager and inductor, dynamic True or False; eager, 'lower' and "
    "'nearest', a float weight, out-of-place torch.lerp and the same call outside a dual level work; "
    "aot_function at duals raises the same assert as a RuntimeError)",
    "x = torch.randn(12, dtype=torch.float64).as_strided((3, 2, 1, 2), (4, 1, 4, 2)); q = "
    "torch.tensor([0.1, 0.2], dtype=torch.float64); f = lambda x, q: torch.nanquantile(x, q, dim=2, "
    "keepdim=True, interpolation='midpoint'); with fwAD.dual_level(): f(fwAD.make_dual(x, "
    "torch.randn_like(x)), q) works; torch.compile(f, backend='aot_eager', dynamic=True)("
    "fwAD.make_dual(x, torch.randn_like(x)), q) -> TorchRuntimeError: ... call_function <built-in "
    "method nanquantile ...> got RuntimeError('InferenceMode::is_enabled() && self.is_inference() "
    'INTERNAL ASSERT FAILED at "/__w/pytorch/pytorch/aten/src/ATen/native/VariableMethodStubs.cpp":66 '
    "... native::_fw_primal'); the same for torch.func.jvp of it compiled, for torch.quantile, and for "
    "torch.compile(lambda a, b, w: a.clone().lerp_(b, w), backend='aot_eager') called inside "
    "fwAD.dual_level() on three plain torch.randn(3, dtype=torch.float64)",
    raises="TorchRuntimeError",
    message=r"call_function <built-in method (nan)?quantile\b.*InferenceMode::is_enabled\(\) && "
    r"self\.is_inference\(\) INTERNAL ASSERT FAILED at \S*VariableMethodStubs\.cpp",
    params={"backend": ("aot_eager", "inductor"), "transform": ("jvp", "dual")},
    records=("24d7dfe46b0bea14",),
    fixed_in="2.14.1",
)

# Discrepancies in how torch runs code's own derivative rules (an autograd.Function's
# jvp, a custom op's fake kernel): they apply to any code that brings such rules, a
# user's included (fuzzdiff.search.blame), not to one op.
OWN_RULES: tuple[Known, ...] = (FUNCTION_JVP_DROPPED_AT_DUALS, FUNCTION_JVP_DROPPED_UNDER_COMPILED_JVP)

BCE_WITH_LOGITS_NESTED_JVP = Known(
    "forward2",
    "nested torch.func.jvp of F.binary_cross_entropy_with_logits raises when the target has no "
    "tangent, and so does torch.func.jacfwd(jacfwd(...)) (torch 2.13.0 CPU; one level of jvp, "
    "reverse over forward and the reverse identities work)",
    "x = torch.randn((), dtype=torch.float64); y = torch.tensor(0.5, dtype=torch.float64); "
    "f = lambda t: F.binary_cross_entropy_with_logits(t, y); torch.func.jvp(lambda a: "
    "torch.func.jvp(f, (a,), (torch.ones_like(a),))[1], (x,), (torch.ones_like(x),)) -> "
    "RuntimeError: ZeroTensors are immutable. Please materialize the tensor using `.clone()`, "
    "if you want a mutable zero tensor.",
    raises="RuntimeError",
    message=r"ZeroTensors are immutable",
    records=("ffae4c40d533972f",),
)

# Found by the compiled_autograd check on opinfo/nn.functional.group_norm@0.
# How a backward that compiled autograd captured says it added an undefined gradient
ADDS_NONE = r"add\(\): argument 'other' \(position 2\) must be Tensor, not NoneType"

GROUP_NORM_COMPILED_AUTOGRAD_ORDER2 = Known(
    "compiled_autograd",
    "compiled autograd (torch._dynamo.compiled_autograd, eager backend) of the second derivative "
    "of F.group_norm with a weight and a bias raises: the captured double backward adds a None "
    "(torch 2.13.0 CPU; without weight and bias, and layer_norm, batch_norm and instance_norm, "
    "it runs; torch 2.15.0 runs it and agrees with eager)",
    "x = torch.randn(2, 6, 3, dtype=torch.float64, requires_grad=True); w, b = (torch.randn(6, "
    "dtype=torch.float64, requires_grad=True) for _ in range(2)); out = F.group_norm(x, 2, w, b); "
    "with compiled_autograd._enable(torch.compile(backend='eager')): g = torch.autograd.grad(out, "
    "(x, w, b), torch.ones_like(out), create_graph=True); torch.autograd.grad(sum((t * t).sum() "
    "for t in g), (x, w, b), allow_unused=True) -> TypeError: add(): argument 'other' (position 2) "
    "must be Tensor, not NoneType",
    raises="TypeError",
    message=ADDS_NONE,
    params={"order": 2},
    records=("8adf8c3f835cd470",),
    fixed_in="2.15.0",
)

VECTOR_NORM_ORD0_COMPILED_AUTOGRAD = Known(
    "compiled_autograd",
    "compiled autograd (torch._dynamo.compiled_autograd, eager backend) of a backward through "
    "torch.linalg.vector_norm(x, 0) (so torch.masked.normalize with ord 0) raises: the norm's "
    "zero derivative is an undefined gradient, and the captured graph adds it as None (torch "
    "2.13.0 and 2.15.0 CPU; eager gives the gradient)",
    "x = torch.tensor([-4.83, 2.0], dtype=torch.float64, requires_grad=True); y = (x / "
    "torch.linalg.vector_norm(x, 0)).sum(); with compiled_autograd._enable(torch.compile("
    "backend='eager')): torch.autograd.grad(y, x) -> TypeError: add(): argument 'other' "
    "(position 2) must be Tensor, not NoneType; without compiled autograd: (0.5, 0.5)",
    raises="TypeError",
    message=ADDS_NONE,
    params={"order": 1},
    records=("18ee23341024c569",),
)

STRICT_EXPORT_EMPTY_STRIDED = Known(
    "export",
    "strict torch.export.export (Dynamo) of a call with an empty input whose zero-size dim has a "
    "stride larger than the other dims span raises: torch._dynamo.utils.clone_input sizes its copy "
    "as sum((size - 1) * stride), negative at a size 0 (torch 2.13.0 and 2.15.0 CPU; non-strict "
    "export runs it; related: pytorch/pytorch#139224 mended the same sum in inductor's "
    "clone_preserve_strides)",
    "class M(torch.nn.Module):\n    def forward(self, a, b): return a * b\n"
    "a = torch.empty_strided((0, 1, 3), (6, 6, 2), dtype=torch.float64); b = torch.empty_strided("
    "(0, 10, 3), (120, 6, 2), dtype=torch.float64); torch.export.export(M(), (a, b), strict=True) "
    "-> RuntimeError: Trying to create tensor with negative dimension -30: [-30]; strict=False exports it",
    raises="RuntimeError",
    message=r"Trying to create tensor with negative dimension",
    params={"strict": True},
    features=("empty",),
    records=("30fdb700be85c93a",),
)

STRICT_EXPORT_UNREGISTERED_PARAMETER = Known(
    "export",
    "strict torch.export.export (Dynamo) of a module whose forward reaches another module's "
    "parameters not through its own attributes (a function that closes over an nn.Module, or reads "
    "one from a global) raises KeyError in torch.export._trace._replace_param_buffer_names: Dynamo "
    "lifts the parameter under its traced name, which the eager module's state does not hold "
    "(torch 2.13.0 CPU; non-strict export runs it; reported upstream as pytorch/pytorch#150428, "
    "fixed by pytorch/pytorch#185728: torch 2.15.0 exports it)",
    "mix = torch.nn.Linear(4, 5).double(); fn = lambda x: mix(x); class M(torch.nn.Module):\n"
    "    def __init__(self): super().__init__(); self.fn = fn\n    def forward(self, x): return self.fn(x)\n"
    "torch.export.export(M(), (torch.randn(2, 4, dtype=torch.float64),), strict=True) -> KeyError: "
    "'L__self___fn___closure___0_cell_contents_weight' (a global module: 'G____import___main_____mix_weight'); "
    "strict=False exports it",
    raises="KeyError",
    message=r"KeyError: '(L__self___\w*_cell_contents_|G____import___)\w+'",
    params={"strict": True},
    fixed_in="2.15.0",
)

EXPORT_DIM_SOLVER_NEGATIVE_POWER = Known(
    "export",
    "torch.export.export with Dim.AUTO fails inside its own dimension-constraint solver where a view of "
    "a symbolic size whose sample value is 1 (x.view(n // 2, 2).view(1, n // 2, 2) at n = 2, as einops' "
    "rearrange('(w n) -> 1 w n') does in local-attention's LocalAttention) is broadcast against itself: "
    "the view's symbolic shape comes out as [n//2, n//2, 2//(n//2)], the broadcast guards 16/n**2 > 1, "
    "and DimConstraints.solve cannot print the n**-2 (torch 2.13.0 CPU, strict and non-strict; torch "
    "2.15.0 exports it, with the same symbolic shape and a guard n // 2 == 1; no upstream report found)",
    "class M(torch.nn.Module):\n    def forward(self, x):\n        n = x.shape[0]; torch._check(n % 2 == 0)\n"
    "        s = x.view(n // 2, 2).view(1, n // 2, 2); return s * s[..., None]\n"
    "torch.export.export(M(), (torch.randn(2),), dynamic_shapes={'x': {0: torch.export.Dim.AUTO}}) "
    "-> AssertionError: exponent must be non-negative, got -2 (torch/utils/_sympy/printers.py, _print_Pow)",
    raises="AssertionError",
    message=r"exponent must be non-negative, got -\d+",
    fixed_in="2.15.0",
)

MSE_LOSS_CONSTANT_TARGET_ZEROTENSOR = Known(
    ("forward2", "gradgrad"),
    "forward over reverse mode of F.mse_loss (reduction 'mean', nn.MSELoss's default) raises where "
    "the target has no tangent (a constant, a label): the forward-AD formula of mse_loss_backward "
    "divides the target's ZeroTensor tangent in place (torch 2.13.0 and 2.15.0 CPU; reverse over "
    "reverse is right; reported: pytorch/pytorch#123996, open, fix proposed in pytorch/pytorch#197723)",
    "x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True); y = torch.randn(2, 3, "
    "dtype=torch.float64); with fwAD.dual_level(): d = fwAD.make_dual(x, torch.randn_like(x)); "
    "torch.autograd.grad(F.mse_loss(d, y), d, create_graph=True) -> RuntimeError: ZeroTensors are "
    "immutable. Please use the materialized zero tensor obtained using .clone() if you want a mutable tensor.",
    raises="RuntimeError",
    message=r"ZeroTensors are immutable",
    records=("d7aa438307bcaee9",),
)

LAYER_NORM_COMPILED_AUTOGRAD_BIAS_ALIASED = Known(
    "compiled_autograd",
    "compiled autograd (torch._dynamo.compiled_autograd, eager backend) of layer norm's second "
    "derivative raises where the bias shares memory with the input (the same tensor, or a view of "
    "it): the captured graph adds the undefined gradient of the bias's path to the input's "
    "(torch 2.13.0 and 2.15.0 CPU; eager autograd is right, and so is compiled autograd with a bias of its "
    "own; upstream: none found)",
    "x = torch.randn(1, 2, 3, dtype=torch.float64, requires_grad=True); w = torch.randn(1, 2, 3, "
    "dtype=torch.float64, requires_grad=True); v, u = torch.randn(1, 2, 3, dtype=torch.float64), "
    "torch.randn(1, 2, 3, dtype=torch.float64); def second(x, w, b): out = torch.native_layer_norm(x, "
    "(1, 2, 3), w, b, 0.5)[0]; gx, gw = torch.autograd.grad(out, (x, w), v, create_graph=True); return "
    "torch.autograd.grad((gx, gw), (x, w), (u, u)); second(x, w, x) works; under "
    "compiled_autograd._enable(lambda gm: torch.compile(gm, backend='eager')) -> TypeError: add(): "
    "argument 'other' (position 2) must be Tensor, not NoneType; second(x, w, torch.randn(1, 2, 3, "
    "dtype=torch.float64, requires_grad=True)) works there",
    raises="TypeError",
    message=r"add\(\): argument '(input|other)' \(position [12]\) must be Tensor, not NoneType",
    params={"order": 2},
    features=("alias:same|alias:view",),
    records=("a138664bf0375252", "27dd995d6d0e022a"),
)


INDUCTOR_UNBATCHED_CONV2D_DYNAMIC = Known(
    "compile",
    "torch.compile with inductor and dynamic=True of conv2d at an unbatched (3-d) input that "
    "requires grad raises while inductor lowers it: a comparison of symbolic sizes that sympy cannot "
    "decide (torch 2.13.0 CPU; any padding; a batched input, dynamic=False, or inputs without grad "
    "compile; torch 2.15.0 compiles it; related: pytorch/pytorch#185510 and #172204, the same "
    "TypeError in inductor with dynamic=True)",
    "f = lambda x, w, b: F.conv2d(x, w, b, padding='same'); args = (torch.randn(4, 3, 4, "
    "dtype=torch.float64, requires_grad=True), torch.randn(5, 4, 3, 3, dtype=torch.float64, "
    "requires_grad=True), torch.randn(5, dtype=torch.float64, requires_grad=True)); f(*args) works; "
    "torch.compile(f, backend='inductor', dynamic=True)(*args) -> InductorError: TypeError: cannot "
    "determine truth value of Relational: s77**2 < s77; torch.randn(2, 4, 3, 4) compiles",
    raises="InductorError",
    message=r"cannot determine truth value of Relational",
    params={"backend": "inductor"},
    records=("d324a044560d9923",),
    fixed_in="2.15.0",
)


# Bugs of the compiling machinery that any op meets under its transform or
# export, whatever the op: every target of torch's own families declares them
MACHINERY = (
    JVP_STRIDE0_AOT_FUNCTION,
    JVP_VIEW_AOT_FUNCTION,
    JVP_CAPTURED_CONSTANT_AOT_FUNCTION,
    JVP_TANGENT_COPY_DYNAMIC,
    STRICT_EXPORT_EMPTY_STRIDED,
    STRICT_EXPORT_UNREGISTERED_PARAMETER,
    EXPORT_DIM_SOLVER_NEGATIVE_POWER,
)
