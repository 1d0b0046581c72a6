"""Known PyTorch discrepancies of OpInfo targets: (target glob, signature).

An entry keeps CI green where torch itself is wrong, and only there: a
failure of a matching target is known when it matches the entry's signature
(fuzzdiff.targets.known), and anything else stays a new failure. Every entry was
verified by hand to be torch's discrepancy, not the adapter's, and its
evidence is a standalone torch snippet with the exact error.
"""

from __future__ import annotations

import fnmatch

from fuzzdiff.targets.discrepancies import (
    DET_GRAD_TRANSPOSED_PERMUTED,
    DUAL_LEVEL_LERP_INPLACE_COMPILE,
    GROUP_NORM_COMPILED_AUTOGRAD_ORDER2,
    GROUP_NORM_VMAP_GAPPED_BATCH,
    LAYER_NORM_COMPILED_AUTOGRAD_BIAS_ALIASED,
    MACHINERY,
    NESTED_JVP_LINALG,
    NESTED_JVP_NORMS,
    NESTED_VMAP_LOSSES,
    REVERSE_OVER_FORWARD_INPLACE,
    VECTOR_NORM_ORD0_COMPILED_AUTOGRAD,
    VMAP_INT_SCALAR_DYNAMIC,
    VMAP_SYMBOLIC_SIZES_DYNAMIC,
    VMAP_UPSAMPLE_SYMINT_OUTPUT_SIZE,
)
from fuzzdiff.targets.known import NOT_NONE, Known

__all__ = ["KNOWN", "known_for"]

_VIEW_SIZE = r"view size is not compatible with input tensor's size and stride"

# The checks that run the op's forward on a case's layout: a forward that raises is
# reported by each of them.
_FORWARD_CALL = (
    "grad",
    "forward",
    "gradgrad",
    "forward2",
    "layout",
    "alias",
    "vmap",
    "compile",
    "dtype",
    "mutation",
    "compiled_autograd",
    "export",
)

_CHANNELS_LAST = Known(
    "vmap",
    "vmap of a memory_format=torch.channels_last conversion of a rank-4 per-example tensor "
    "raises: the batched tensor is rank 5 (torch 2.13.0 CPU)",
    "torch.func.vmap(lambda x: x.to(memory_format=torch.channels_last))(torch.randn(2, 5, 5, 5, 5)) "
    "-> RuntimeError: required rank 4 tensor to use channels_last format; the loop "
    "[x.to(memory_format=torch.channels_last) for x in xs] works. The same for "
    "x.double(memory_format=...), .float, .half, .bfloat16, .cfloat, .cdouble, .chalf",
    raises="RuntimeError",
    message=r"required rank 4 tensor to use channels_last format",
)

_CHANNELS_LAST_COMPILED = Known(
    "compile",
    "the vmap discrepancy above, reached by the compile check's vmap transform: the traced "
    "vmap raises as eager vmap does (torch 2.13.0 CPU)",
    "aot_function(torch.func.vmap(lambda x: x.double(memory_format=torch.channels_last)), nop, "
    "nop)(torch.randn(2, 5, 5, 5, 5)) -> RuntimeError: required rank 4 tensor to use channels_last format",
    raises="RuntimeError",
    message=r"required rank 4 tensor to use channels_last format",
    params={"transform": "vmap"},
    records=("573676d052951ccb",),
)

_KRON = Known(
    _FORWARD_CALL,
    "torch.kron raises when exactly one of two 2-d operands is transposed (torch 2.13.0 CPU), in the forward itself",
    "torch.kron(torch.randn(2, 2), torch.randn(2, 2).t()) -> RuntimeError: view size is not "
    "compatible with input tensor's size and stride (at least one dimension spans across "
    "two contiguous subspaces). Use .reshape(...) instead.; with .contiguous() it works",
    raises="RuntimeError",
    message=_VIEW_SIZE,
    records=("684414f3502a0a8a",),
)

_GRID_SAMPLE_REASON = (
    "vmap of torch.grid_sampler_2d and _3d (F.grid_sample) with the input and the grid batched "
    "at different dims (0 and 1) gives an output of the wrong shape and values, silently (torch "
    "2.13.0 CPU; 2.15.0 is right)"
)
_GRID_SAMPLE_EVIDENCE = (
    "from torch.func import vmap; f = lambda a, g: torch.grid_sampler_2d(a, g, 0, 0, False); "
    "vmap(f, in_dims=(0, 1))(torch.randn(1, 2, 3, 5, 5), torch.rand(2, 1, 13, 10, 2) * 2 - 1)"
    ".shape == [2, 1, 3, 13, 10]; the loop over the batch gives [1, 2, 3, 13, 10]; with 3 "
    "examples of 2 images, x = torch.randn(3, 2, 3, 5, 5), g = torch.rand(2, 3, 5, 5, 2) * 2 - 1: "
    "vmap(F.grid_sample, in_dims=(0, 1))(x, g) has shape [2, 3, 3, 5, 5] and no transpose of it "
    "equals torch.stack([F.grid_sample(x[j], g[:, j]) for j in range(3)])"
)
_GRID_SAMPLE = Known(
    "vmap",
    _GRID_SAMPLE_REASON,
    _GRID_SAMPLE_EVIDENCE,
    params={"levels.0.in_dims.0": NOT_NONE, "levels.0.in_dims.1": NOT_NONE},
    fixed_in="2.15.0",
)
# under vmap of a vjp the wrong shape meets the cotangent, and multiplying the two raises
_GRID_SAMPLE_RAISED = Known(
    "vmap",
    f"{_GRID_SAMPLE_REASON}; where a derivative is taken through it, the wrong shape raises",
    _GRID_SAMPLE_EVIDENCE,
    raises="RuntimeError",
    message=r"The size of tensor a \(\d+\) must match the size of tensor b \(\d+\)",
    params={"levels.0.in_dims.0": NOT_NONE, "levels.0.in_dims.1": NOT_NONE},
    records=("f85669e3bbe42b4b",),
    fixed_in="2.15.0",
)
# the same batching rule at the inner level of a nested vmap, the grid unbatched at the outer one
_GRID_SAMPLE_INNER = Known(
    "vmap",
    f"{_GRID_SAMPLE_REASON}; at the inner level of a nested vmap too",
    _GRID_SAMPLE_EVIDENCE,
    params={"levels.1.in_dims.0": NOT_NONE, "levels.1.in_dims.1": NOT_NONE},
    records=("e4e587b0515c1b96",),
    fixed_in="2.15.0",
)

_GRID_SAMPLE_BATCH_LAST = Known(
    "vmap",
    "vmap of torch.grid_sampler_2d (F.grid_sample) with the grid batched at its last dim "
    "trips an internal assertion in functorch's batching rule helper, where the loop over the "
    "batch works (torch 2.13.0 CPU)",
    "from torch.func import vmap; f = lambda a, g: torch.grid_sampler_2d(a, g, 0, 0, False); "
    "vmap(f, in_dims=(0, -1))(torch.randn(1, 2, 3, 5, 20, dtype=torch.float64), "
    "torch.rand(2, 13, 10, 2, 1, dtype=torch.float64) * 2 - 1) -> RuntimeError: shape[src] % "
    "size1 == 0 INTERNAL ASSERT FAILED at aten/src/ATen/functorch/BatchRulesHelper.cpp:119",
    raises="RuntimeError",
    message=r"shape\[src\] % size1 == 0 INTERNAL ASSERT FAILED",
    records=("42bd33bcc676d162",),
    fixed_in="2.15.0",
)

# The misplaced batch dim above, seen from vmap's vjp compositions: the cotangent
# has the loop's shape, the vmapped output another.
_GRID_SAMPLE_VJP = Known(
    "vmap",
    "the same misplaced output batch dim of vmap(torch.grid_sampler_2d) with the batch at dim 0 "
    "of the input and dim 1 of the grid, reached through a vjp: the cotangent's shape no longer "
    "fits (torch 2.13.0 CPU)",
    "from torch.func import vmap, vjp; f = lambda a, g: torch.grid_sampler_2d(a, g, 0, 0, False); "
    "a, g = torch.randn(1, 2, 3, 5, 5), torch.rand(2, 1, 5, 5, 2) * 2 - 1; out, pull = "
    "vjp(vmap(f, in_dims=(0, 1)), a, g) -> out.shape [2, 1, 3, 5, 5], the loop's [1, 2, 3, 5, "
    "5]; inside vmap of a vjp: RuntimeError: Mismatch in shape: grad_output[0] has a shape of "
    "torch.Size([2, 3, 5, 5]) and output[0] has a shape of torch.Size([1, 3, 5, 5]); "
    "vmap(grad(lambda a, g: f(a, g).sum()), in_dims=(0, 1))(torch.randn(1, 2, 3, 5, 20), "
    "torch.rand(2, 1, 13, 10, 2) * 2 - 1) -> RuntimeError: Function GridSampler2DBackward0 "
    "returned an invalid gradient at index 0 - got [1, 3, 5, 20] but expected shape compatible "
    "with [2, 3, 5, 20]",
    raises="RuntimeError",
    message=r"Mismatch in shape: grad_output\[0\] has a shape of"
    r"|GridSampler[23]DBackward0 returned an invalid gradient at index 0",
    params={"levels.0.in_dims.0": NOT_NONE, "levels.0.in_dims.1": NOT_NONE},
    records=("23e3826d4baccbed", "4454adfdcddfd389"),
    fixed_in="2.15.0",
)

_MAX_POOL3D = Known(
    _FORWARD_CALL,
    "F.max_pool3d raises for an unbatched (C, D, H, W) input in a permuted layout that is "
    "neither contiguous nor channels_last, in the forward itself (torch 2.13.0 CPU)",
    "F.max_pool3d(torch.empty_strided((2, 6, 6, 5), (180, 1, 30, 6), dtype=torch.float64)"
    ".normal_(), 2, 1, 1) -> RuntimeError: Unsupported memory format. Supports only "
    "ChannelsLast3d, Contiguous; with .contiguous() it works",
    raises="RuntimeError",
    message=r"Unsupported memory format\. Supports only ChannelsLast3d, Contiguous",
    records=("17ae3e645bcc999b",),
)

# The masked ops' gradcheck wrapper calls torch.masked._output_mask(op, ...): dynamo
# puts that call in its graph with the op, a Python function, as an argument
_OUTPUT_MASK_REASON = (
    "dynamo traces torch.masked._output_mask(op, input, ...) (which OpInfo's gradcheck wrapper of the masked "
    "ops calls) as a graph call, and FX cannot take its first argument, a Python function: an internal "
    "NotImplementedError instead of a graph break (torch 2.13.0 and 2.15.0 CPU; the masked ops alone export and "
    "compile; upstream: none found)"
)
_OUTPUT_MASK_EVIDENCE = (
    "x = torch.randn(5, dtype=torch.float64); mask = torch.tensor([True, True, False, False, True]); "
    "f = lambda x: torch.masked._output_mask(torch.masked.cumsum, x, 0, mask=mask); f(x) works; "
    "torch.compile(f, backend='eager', fullgraph=True)(x) -> InternalTorchDynamoError: NotImplementedError: "
    "argument of type: <class 'function'>; torch.export.export of a module calling it (strict) -> "
    "NotImplementedError: argument of type: <class 'function'>"
)
MASKED_OUTPUT_MASK_TRACED = (
    Known(
        ("compile", "compiled_autograd"),
        _OUTPUT_MASK_REASON,
        _OUTPUT_MASK_EVIDENCE,
        raises="InternalTorchDynamoError",
        message=r"NotImplementedError: argument of type: <class 'function'>",
        records=("425b83a22d4772fb",),
    ),
    Known(
        "export",
        _OUTPUT_MASK_REASON,
        _OUTPUT_MASK_EVIDENCE,
        raises="NotImplementedError",
        message=r"argument of type: <class 'function'>",
        params={"strict": True},
        records=("579243876b26c5fb",),
    ),
)
# compiled autograd's captured graph accumulates a leaf's gradients with torch.add
# whether or not one is undefined (torch/_dynamo/compiled_autograd.py, accumulate),
# where eager autograd skips an undefined one: the group norm, vector norm and layer
# norm entries of fuzzdiff.targets.discrepancies, and these
_ADDS_UNDEFINED = r"add\(\): argument '(input|other)' \(position [12]\) must be Tensor, not NoneType"
_ADDS_UNDEFINED_UPSTREAM = (
    "related: pytorch/pytorch#160679, closed, on compiled autograd's accumulation of undefined gradients"
)
GRID_SAMPLE_NEAREST_COMPILED_AUTOGRAD_ALIASED = Known(
    "compiled_autograd",
    "compiled autograd of grid_sample's second derivative in nearest mode where the input and the grid "
    "share one leaf: the double backward leaves the input's path undefined (the grid's gradient is zero "
    "in nearest mode, whatever the input) and the captured graph adds it to the grid's as None (torch "
    f"2.13.0 CPU, 2-d and 3-d; eager autograd gives zeros; {_ADDS_UNDEFINED_UPSTREAM})",
    "x = torch.randn(3, dtype=torch.float64, requires_grad=True); def second(): out = "
    "F.grid_sample(x.reshape(1, 3, 1, 1, 1), x.reshape(1, 1, 1, 1, 3), mode='nearest', "
    "padding_mode='reflection', align_corners=True); (g,) = torch.autograd.grad(out, x, "
    "torch.ones_like(out), create_graph=True); return torch.autograd.grad(g, x, torch.ones_like(g)); "
    "second() -> zeros; under compiled_autograd._enable(lambda gm: gm.forward) -> TypeError: add(): "
    "argument 'other' (position 2) must be Tensor, not NoneType; the same with torch.compile(gm, "
    "backend='eager')",
    raises="TypeError",
    message=_ADDS_UNDEFINED,
    params={"order": 2},
    features=("alias:same|alias:view",),
    records=("19301ca854b6465a",),
)
ORMQR_EMPTY_COMPILED_AUTOGRAD_ALIASED = Known(
    "compiled_autograd",
    "compiled autograd of ormqr's gradient at empty inputs where input and other share one leaf: the "
    "backward leaves the input's and tau's gradients undefined and gives other's, and the captured "
    f"graph adds the undefined one as None (torch 2.13.0 CPU; eager autograd runs; {_ADDS_UNDEFINED_UPSTREAM})",
    "A = torch.zeros(0, 0, dtype=torch.float64, requires_grad=True); tau = torch.zeros(0, "
    "dtype=torch.float64, requires_grad=True); out = torch.ormqr(A, tau, A); "
    "torch.autograd.grad(out, [A, tau], torch.ones_like(out), allow_unused=True) -> (empty, None); "
    "under compiled_autograd._enable(lambda gm: gm.forward) -> TypeError: add(): argument 'input' "
    "(position 1) must be Tensor, not NoneType",
    raises="TypeError",
    message=_ADDS_UNDEFINED,
    features=("alias:same|alias:view", "empty"),
    records=("5e578f1a8d4d0685",),
)
# an OpOverload called with a lone int for an int[N] argument broadcasts it, and refuses a
# lone SymInt: what torch.compile(dynamic=True) makes of an int the compiled call is given
LONE_SYMINT_FOR_INT_LIST = Known(
    ("compile", "compiled_autograd", "export"),
    "torch.ops.aten.max_pool2d_with_indices_backward.default takes a lone int for its int[2] "
    "kernel_size and stride, and refuses a lone SymInt: torch.compile(dynamic=True) of a call given "
    "those ints raises in dynamo's fake-tensor run (torch 2.13.0 CPU; [s, s] is taken, and so is a "
    "lone SymInt through the OpOverloadPacket under dynamo; upstream: none found; related: "
    "pytorch/pytorch#122129, the same schema conversion refusing an immutable_list)",
    "f = lambda g, x, idx, k: torch.ops.aten.max_pool2d_with_indices_backward.default(g, x, k, 2, 0, 1, "
    "True, idx); x = torch.randn(1, 2, 3, 6, dtype=torch.float64); out, idx = "
    "F.max_pool2d_with_indices(x, 3, 2, 0, 1, ceil_mode=True, return_indices=True); g = "
    "torch.ones_like(out); f(g, x, idx, 3) works, and so does torch.compile(f, backend='aot_eager', "
    "dynamic=False); torch.compile(f, backend='aot_eager', dynamic=True)(g, x, idx, 3) -> "
    "TorchRuntimeError: ... Expected a value of type 'List[int]' for argument 'kernel_size' but "
    "instead found type 'SymInt'",
    raises="TorchRuntimeError",
    message=r"Expected a value of type 'List\[int\]' for argument '\w+' but instead found type 'SymInt'",
    records=("a0584b2a1c201599",),
)
KNOWN: tuple[tuple[str, Known], ...] = (
    (
        "opinfo/roll@*",
        Known(
            "vmap",
            "vmap of the vjp of torch.roll on a 0-dim per-example input rolls the batch: each "
            "example gets another example's gradient (torch 2.13.0 CPU)",
            "from torch.func import vmap, vjp; xs, vs = torch.randn(3), torch.randn(3); "
            "per = lambda x, v: vjp(lambda t: torch.roll(t, 1), x)[1](v)[0]; "
            "vmap(per)(xs, vs) == vs.roll(-1), not vs (the loop [per(x, v) for x, v in zip(xs, vs)] "
            "gives vs; torch.roll of a 0-dim tensor is the identity)",
            features=("0:rank0",),
        ),
    ),
    (
        "opinfo/select_scatter@*",
        Known(
            "vmap",
            "vjp of vmap(torch.select_scatter) with a 0-dim per-example src sums the whole "
            "cotangent row into src's gradient instead of the selected element (torch 2.13.0 CPU)",
            "from torch.func import vmap, vjp; f = lambda x, s: torch.select_scatter(x, s, 0, 2); "
            "x, s, ct = torch.randn(1, 5), torch.randn(1), torch.randn(1, 5); "
            "vjp(vmap(f), x, s)[1](ct)[1] == ct.sum(1), expected ct[:, 2] "
            "(vjp(f, x[0], s[0])[1](ct[0])[1] == ct[0, 2])",
            features=("1:rank0",),
        ),
    ),
    (
        "opinfo/select_scatter@*",
        Known(
            "vmap",
            "vjp of vmap(torch.select_scatter) gives src a wrong gradient, batched or not, for any "
            "dim and index, where the loop over the batch is right (torch 2.13.0 CPU)",
            "from torch.func import vmap, vjp; f = lambda x, s: torch.select_scatter(x, s, 0, 0); x, s, "
            "ct = torch.randn(1, 5, 5, 5, dtype=torch.float64), torch.randn(5, 5, dtype=torch.float64), "
            "torch.randn(1, 5, 5, 5, dtype=torch.float64); vjp(vmap(f, in_dims=(0, None)), x, s)[1](ct)"
            "[1] differs from vjp(lambda t: f(x[0], t), s)[1](ct[0])[0] by up to 8.8; with s batched "
            "(s = torch.randn(1, 5, 5), in_dims=(0, 0)) vjp(vmap(f), x, s)[1](ct)[1][0] differs from "
            "vjp(f, x[0], s[0])[1](ct[0])[1] by up to 8.8 too (dims 1 and 2: 10.5, 11.3)",
            message=r"vs a loop over the batch: grad of argument 1 at",
            params={"composition": "vjp_vmap"},
            records=("3e461163479a71b2",),
        ),
    ),
    (
        "opinfo/view_copy@*",
        Known(
            "vmap",
            "the forward-mode bug of torch.view_copy below, reached through vmap's jvp compositions (torch 2.13.0 CPU)",
            "torch.func.vmap(lambda t: torch.func.jvp(lambda u: torch.view_copy(u, (25, 5)), (t,), "
            "(torch.ones_like(t),)))(torch.randn(1, 5, 5, 5, dtype=torch.float64).permute(0, 1, 3, 2)) "
            "-> RuntimeError: view size is not compatible with input tensor's size and stride",
            raises="RuntimeError",
            message=_VIEW_SIZE,
            params={"composition": ("vmap_jvp", "jvp_vmap")},
        ),
    ),
    (
        "opinfo/view_copy@*",
        Known(
            ("forward", "gradgrad", "forward2"),
            "forward-mode AD of torch.view_copy raises for an input whose layout a view cannot "
            "reshape, where the primal (a copy) and reverse mode work (torch 2.13.0 CPU)",
            "import torch.autograd.forward_ad as fwAD; x = torch.randn(5, 5, 5, dtype=torch.float64)"
            ".permute(0, 2, 1); torch.view_copy(x, (25, 5)) works; with fwAD.dual_level(): "
            "torch.view_copy(fwAD.make_dual(x, torch.randn_like(x)), (25, 5)) -> RuntimeError: view "
            "size is not compatible with input tensor's size and stride (at least one dimension "
            "spans across two contiguous subspaces). Use .reshape(...) instead.",
            raises="RuntimeError",
            message=_VIEW_SIZE,
        ),
    ),
    (
        "opinfo/view_copy@*",
        Known(
            "compile",
            "the forward-mode bug of torch.view_copy above, met by the compile check's eager side when it "
            "feeds dual tensors or runs torch.func.jvp (torch 2.13.0 CPU)",
            "import torch.autograd.forward_ad as fwAD; x = torch.randn(5, 5, 5, dtype=torch.float64)"
            ".transpose(1, 2); with fwAD.dual_level(): torch.view_copy(fwAD.make_dual(x, torch.randn(5, 5, 5, "
            "dtype=torch.float64)), (25, 5)) -> RuntimeError: view size is not compatible with input tensor's "
            "size and stride",
            raises="RuntimeError",
            message=_VIEW_SIZE,
            params={"transform": ("dual", "jvp")},
            records=("0e9865b272a0ec1f",),
        ),
    ),
    (
        "opinfo/logcumsumexp@*",
        Known(
            "forward",
            "forward-mode AD of torch.logcumsumexp drops the tangents of the elements before a "
            "large one (1e4, in OpInfo's own sample): the JVP is wrong, reverse mode and finite "
            "differences agree (torch 2.13.0 CPU)",
            "from torch.func import jvp; x = torch.randn(5, dtype=torch.float64); x[2] = 1e4; "
            "u = torch.randn(5, dtype=torch.float64); jvp(lambda t: torch.logcumsumexp(t, 0), (x,), "
            "(u,))[1] -> tensor([0., 0., u2, u2, u2]); the first entry must be u[0] "
            "(logcumsumexp(x)[0] == x[0])",
            message=r"^<v, J u> \(forward\) vs ",
        ),
    ),
    (
        "opinfo/logcumsumexp@*",
        Known(
            ("gradgrad", "forward2"),
            "forward-over-reverse of torch.logcumsumexp (the tangent of its VJP) is wrong where an "
            "element is large (1e4, in OpInfo's own sample), where reverse-over-reverse and finite "
            "differences of the VJP agree (torch 2.13.0 CPU; OpInfo expects failure of "
            "test_fn_fwgrad_bwgrad for complex128 only)",
            "import torch.autograd.forward_ad as fwAD; torch.manual_seed(0); x = torch.randn(5, "
            "dtype=torch.float64); x[2] = 1e4; v, u = torch.randn(5, dtype=torch.float64), "
            "torch.randn(5, dtype=torch.float64); with fwAD.dual_level(): xd = fwAD.make_dual(x.clone()"
            ".requires_grad_(), u); g = torch.autograd.grad(torch.logcumsumexp(xd, 0), xd, v, "
            "create_graph=True)[0]; fwAD.unpack_dual(g).tangent -> [0.6269, 0.0101, 0.2438, 0, 0]; "
            "finite differences of the VJP along u and reverse-over-reverse give [-0.0373, 0.0373, 0, 0, 0]",
            message=r"^(<w, d2f\[u, u'\]> )?forward-over-reverse vs finite differences",
            records=("267e81f8fd2ceef8",),
        ),
    ),
    (
        "opinfo/cholesky_inverse@*",
        Known(
            ("forward", "gradgrad", "forward2"),
            "forward-mode AD of torch.cholesky_inverse is wrong for any non-diagonal factor (the JVP "
            "multiplies in the wrong order, pytorch/pytorch#196682); OpInfo's samples are factors "
            "within 1e-3 of the identity, where the error is second order and small: the first-order "
            "check exceeds its tolerance only where the fuzzed offsets add to the sample's (its record, "
            "4x the tolerance, has every offset at the edge of its interval), forward-over-reverse "
            "anywhere (torch 2.13.0 CPU)",
            "torch.manual_seed(0); L = torch.eye(4, dtype=torch.float64) + 0.5 * torch.randn(4, 4, "
            "dtype=torch.float64).tril(-1); dL = torch.randn(4, 4, dtype=torch.float64).tril(); "
            "torch.func.jvp(torch.cholesky_inverse, (L,), (dL,))[1] differs from the finite "
            "difference (cholesky_inverse(L + 1e-6 dL) - cholesky_inverse(L - 1e-6 dL)) / 2e-6 by up "
            "to 4.36, while the closed form -X (dL L^T + L dL^T) X (X = cholesky_inverse(L)) and "
            "reverse mode agree with it to 4e-10",
            message=r"^<v, J u> \(forward\) vs |^forward-over-reverse vs finite differences"
            r"|^<w, d2f\[u, u'\]> (forward-over-reverse|reverse-over-forward|forward-over-forward|hessian"
            r"|jacfwd\(jacfwd\)) vs finite",
            records=("61f1feccb8aaa4f2",),
        ),
    ),
    (
        "opinfo/triangular_solve@*",
        Known(
            "gradgrad",
            "forward-over-reverse of torch.triangular_solve (the tangent of its VJP) is wrong, for "
            "the gradients of both b and A, where its first-order forward mode, reverse-over-reverse "
            "and torch.linalg.solve_triangular are right (torch 2.13.0 CPU)",
            "torch.manual_seed(0); b = torch.randn(4, 1, dtype=torch.float64); A = torch.eye(4, "
            "dtype=torch.float64) + 0.5 * torch.randn(4, 4, dtype=torch.float64).triu(1); v = "
            "torch.randn(4, 1, dtype=torch.float64); ub, uA = torch.randn_like(b), "
            "torch.randn_like(A).triu(); the tangent along (ub, uA) of torch.autograd.grad("
            "torch.triangular_solve(b, A).solution, (b, A), v, create_graph=True) under "
            "torch.autograd.forward_ad differs from finite differences of that VJP by 1.14 (grad b) "
            "and 2.59 (grad A); with torch.linalg.solve_triangular(A, b, upper=True) by 5e-11",
            message=r"^forward-over-reverse vs finite differences",
            records=("973b4ed21a14a89f",),
        ),
    ),
    *(
        (f"opinfo/nn.functional.{name}@*", known)
        for name in ("mse_loss", "huber_loss", "smooth_l1_loss")
        for known in NESTED_VMAP_LOSSES
    ),
    ("opinfo/kron@*", _KRON),
    *(
        (f"opinfo/{name}@*", known)
        for name in ("grid_sampler_2d", "nn.functional.grid_sample")
        for known in (_GRID_SAMPLE, _GRID_SAMPLE_RAISED, _GRID_SAMPLE_INNER, _GRID_SAMPLE_VJP, _GRID_SAMPLE_BATCH_LAST)
    ),
    ("opinfo/nn.functional.max_pool3d@*", _MAX_POOL3D),
    (
        "opinfo/triangular_solve@*",
        Known(
            "vmap",
            "forward-mode AD of vmap(torch.triangular_solve) with an unbatched empty (0 x 0) matrix "
            "raises, where the loop works (torch 2.13.0 CPU)",
            "from torch.func import vmap, jvp; f = lambda b, A: torch.triangular_solve(b, A).solution; "
            "b, A = torch.randn(1, 2, 2, 0, 0, dtype=torch.float64), torch.randn(2, 2, 0, 0, "
            "dtype=torch.float64); jvp(vmap(f, in_dims=(0, None)), (b, A), (torch.randn_like(b), "
            "torch.randn_like(A))) -> RuntimeError: Trying to set a forward gradient that has a "
            "different size than that of the original Tensor, this is not supported. Tensor is of "
            "size [1, 2, 2, 0, 0] while the given forward gradient is of size [2, 2, 0, 0].",
            raises="RuntimeError",
            message=r"Trying to set a forward gradient that has a different size than that of the original Tensor",
            records=("051ff64ce577cd4c",),
        ),
    ),
    (
        "opinfo/nextafter@*",
        Known(
            ("grad", "forward"),
            "the derivative of torch.nextafter(a, b) is 0 in a where a == b, and 0 in b everywhere, so "
            "nextafter(x, x) = x gets the derivative 0 where finite differences give 1; reverse and "
            "forward mode agree with each other, finite differences and gradcheck do not (torch 2.13.0 "
            "CPU). Only an aliased tie is confirmed: a tie by value vanishes at a neighbouring point",
            "x = torch.tensor([0.5], dtype=torch.float64, requires_grad=True); "
            "torch.autograd.grad(torch.nextafter(x, x).sum(), x) -> [0.]; "
            "torch.autograd.gradcheck(lambda t: torch.nextafter(t, t), (x,)) -> GradcheckError: "
            "Jacobian mismatch ... numerical: 1.0, analytical: 0.",
            message=r"vs finite differences: analytic",
            features=("1:alias:same|1:alias:view",),
            records=("5cbf153cd1380cb6", "2bdb74096979a533"),
            expected="the rule that pytorch/pytorch#148820 introduced on purpose, answering the "
            "request for any derivative of nextafter (pytorch/pytorch#148814): 1 in a where a != b, "
            "0 where a == b ('the function is constant at that point', its description says, and its "
            "test asserts the 0), and 0 in b. At a tie nextafter is not differentiable as a function "
            "of its two arguments (it steps one ulp up on one side of the tie and one ulp down on the "
            "other), so no value there is right and the 0 is a convention",
        ),
    ),
    (
        "opinfo/linalg.householder_product@*",
        Known(
            "forward2",
            "reverse mode through the jvp of torch.linalg.householder_product gives wrong second "
            "derivatives: its forward-mode formula is not differentiable itself, while reverse over "
            "reverse and forward over reverse agree with finite differences (torch 2.13.0 CPU)",
            "torch.manual_seed(0); A, tau = torch.randn(5, 4, dtype=torch.float64), torch.randn(3, "
            "dtype=torch.float64); (u, ut), (v, vt), w = (torch.randn_like(A), torch.randn_like(tau)), "
            "(torch.randn_like(A), torch.randn_like(tau)), torch.randn(5, 4, dtype=torch.float64); "
            "with A, tau requiring grad, the gradient of <w, the tangent of householder_product(A, tau) "
            "under torch.autograd.forward_ad along (u, ut)> dotted with (v, vt) is 82.5; reverse over "
            "reverse and forward over reverse give 37.07",
            message=r"^<w, d2f\[u, u'\]> (reverse-over-forward|forward-over-forward|jacfwd\(jacfwd\)) vs finite",
            records=("0f362ba860e1de7d",),
        ),
    ),
    (
        "opinfo/linalg.eigh@*",
        Known(
            "forward2",
            "reverse mode through the jvp of torch.linalg.eigh's eigenvectors gives nan at a symmetric "
            "matrix with distinct eigenvalues: its forward-mode formula is not differentiable itself, "
            "while nested torch.func.jvp, reverse over reverse and finite differences agree (torch "
            "2.13.0 CPU)",
            "torch.manual_seed(0); X = torch.randn(4, 4, dtype=torch.float64); A = X + X.mT "
            "(eigenvalues -6.58, -4.00, 1.78, 2.95); U, V, W = (torch.randn(4, 4, dtype=torch.float64) "
            "for _ in range(3)); def dV(a): with fwAD.dual_level(): return (fwAD.unpack_dual("
            "torch.linalg.eigh(fwAD.make_dual(a, U + U.mT)).eigenvectors).tangent * W).sum(); "
            "a = A.clone().requires_grad_(); (torch.autograd.grad(dV(a), a)[0] * (V + V.mT)).sum() -> "
            "nan; (dV(A + 1e-6 * (V + V.mT)) - dV(A - 1e-6 * (V + V.mT))) / 2e-6 -> -1.1394, and "
            "nested torch.func.jvp of eigh's eigenvectors along U + U.mT, V + V.mT, dotted with W, "
            "-> -1.1394",
            message=r"^<w, d2f\[u, u'\]> reverse-over-forward vs finite differences: analytic nan",
            records=("1ad945328b52442d",),
        ),
    ),
    (
        "opinfo/linalg.eig@*",
        Known(
            "forward2",
            "reverse mode through the jvp of torch.linalg.eig raises 'The eigenvectors in the complex "
            "case are specified up to multiplication by e^{i phi}. The specified loss function depends "
            "on this quantity, so it is ill-defined.' for a loss that does not depend on the "
            "eigenvectors' phases (abs of the eigenvectors, OpInfo's own output_process_fn_grad), "
            "while reverse over reverse and finite differences of the same forward-mode tangent "
            "agree on a finite value (torch 2.13.0 CPU, 2.14.1 and 2.15.0 alike). Not eig's documented "
            "phase indeterminacy: the cotangents that reach linalg_eig_backward through eig's "
            "forward-mode formula are nan in every entry (the eigenvalues' too, and for |V|^2 as for "
            "abs), and its phase check, allclose(imag(diag(V^H gV)), 0), fails on the nan; eigh's "
            "forward-mode formula gives nan the same way (opinfo/linalg.eigh)",
            "torch.manual_seed(0); A = torch.randn(5, 5, dtype=torch.float64); U, V, W = "
            "(torch.randn(5, 5, dtype=torch.float64) for _ in range(3)); def h(a): with "
            "fwAD.dual_level(): return (fwAD.unpack_dual(torch.linalg.eig(fwAD.make_dual(a, U))[1]"
            ".abs()).tangent * W).sum(); a = A.clone().requires_grad_(); torch.autograd.grad(h(a), a) "
            "-> RuntimeError: linalg_eig_backward: The eigenvectors in the complex case are specified "
            "up to multiplication by e^{i phi}. The specified loss function depends on this quantity, "
            "so it is ill-defined.; (h(A + 1e-6 * V) - h(A - 1e-6 * V)) / 2e-6 -> -2.1524, reverse "
            "over reverse of (torch.linalg.eig(a)[1].abs() * W).sum() along U, V -> -2.1524",
            raises="RuntimeError",
            message=r"^raised RuntimeError: linalg_eig_backward: The eigenvectors in the complex case are "
            r"specified up to multiplication by e\^\{i phi\}",
            records=("6290040c5e3c4b62",),
        ),
    ),
    (
        "opinfo/masked.logaddexp@*",
        Known(
            "forward2",
            "the second derivatives of torch.masked.logaddexp are nan where exactly one of its two "
            "arguments is masked out: it puts -inf there, and logaddexp's backward for b, "
            "1 / (1 + exp(a - b)), has the derivative -inf / inf = nan in a at b = -inf, though the "
            "result is the other argument, smooth (OpInfo skips test_fn_gradgrad for it; torch "
            "2.13.0 CPU)",
            "p, q = torch.tensor([-1.0], dtype=torch.float64, requires_grad=True), torch.tensor([0.5], "
            "dtype=torch.float64, requires_grad=True); out = torch.masked.logaddexp(p, q, "
            "input_mask=torch.tensor([True]), other_mask=torch.tensor([False])) (= p); gq, = "
            "torch.autograd.grad(out.sum(), q, create_graph=True) (0.); torch.autograd.grad(gq.sum(), "
            "p) -> (tensor([nan]),), where out = p whatever q: 0",
            message=r"^<w, d2f\[u, u'\]> (reverse-over-reverse|forward-over-reverse) vs finite differences: "
            r"analytic nan",
            records=("4fb1429c65a29484",),
        ),
    ),
    ("opinfo/linalg.det@*", DET_GRAD_TRANSPOSED_PERMUTED),
    # the catalog's forward2 discrepancies, on OpInfo's samples of the same ops
    *(
        (f"opinfo/{name}@*", NESTED_JVP_LINALG)
        for name in ("linalg.det", "linalg.slogdet", "logdet", "linalg.solve", "linalg.solve_ex", "linalg.tensorsolve")
    ),
    *(
        (f"opinfo/{name}@*", REVERSE_OVER_FORWARD_INPLACE)
        for name in (
            "log_softmax",
            "log_softmax.with_dtype",
            "softmax",
            "softmax.with_dtype",
            "torch.ops.aten._safe_softmax.default",
            "nn.functional.softmin",
            "nn.functional.softmin.with_dtype",
            "masked.log_softmax",
            "masked.softmax",
            "masked.softmin",
            "logcumsumexp",
            "logsumexp",
            "masked.logsumexp",
            "nn.functional.cross_entropy",
            "nn.functional.linear_cross_entropy",
            "nn.functional.normalize",
        )
    ),
    *((f"opinfo/nn.functional.{name}@*", NESTED_JVP_NORMS) for name in ("layer_norm", "instance_norm", "batch_norm")),
    ("opinfo/logdet@*", DET_GRAD_TRANSPOSED_PERMUTED),
    ("opinfo/nn.functional.group_norm@*", GROUP_NORM_VMAP_GAPPED_BATCH),
    ("opinfo/nn.functional.group_norm@*", GROUP_NORM_COMPILED_AUTOGRAD_ORDER2),
    (
        "opinfo/combinations@*",
        Known(
            "export",
            "torch.export (strict or not) of torch.combinations with r > 1 fails inside its symbolic "
            "shapes: the mask it selects by leaves unbacked sizes the output does not bind (torch "
            "2.13.0 CPU; 2.15.0 exports it and agrees with eager)",
            "class M(torch.nn.Module):\n    def forward(self, x): return torch.combinations(x, r=4, "
            "with_replacement=True)\ntorch.export.export(M(), (torch.randn(2, dtype=torch.float64),)) -> "
            "PendingUnbackedSymbolNotFound: Pending unbacked symbols {u1, u2, u3} not in returned outputs "
            "FakeTensor(..., size=(u0, 4)); eager gives a (5, 4) tensor",
            raises="PendingUnbackedSymbolNotFound",
            message=r"Pending unbacked symbols .* not in returned outputs",
            records=("9a3ad6ae8cd2a4ab",),
            fixed_in="2.15.0",
        ),
    ),
    *(
        (f"opinfo/{name}@*", VECTOR_NORM_ORD0_COMPILED_AUTOGRAD)
        for name in ("masked.normalize", "masked.norm", "linalg.vector_norm", "linalg.norm", "norm")
    ),
    (
        "opinfo/native_group_norm@*",
        Known(
            ("layout", "alias", "forward", "vmap", "gradgrad", "forward2", "dtype", "compile"),
            "torch.native_group_norm reads a weight or bias that is not dense (stride 0, or sliced "
            "with a step) as if it were contiguous, past its elements: its output and the gradients "
            "of its input are silently wrong, where F.group_norm (which makes them contiguous) is "
            "right (torch 2.13.0 CPU; fixed in 2.14.1)",
            "x = torch.randn(2, 4, 3).double(); w = torch.randn(1).double().expand(4); b = "
            "torch.randn(8).double()[::2]; torch.native_group_norm(x, w, b, 2, 4, 3, 2, 1e-5)[0] differs "
            "from the same call with w.contiguous(), b.contiguous() by up to 0.98 (torch.manual_seed(0))",
            features=("1:gapped|1:stride0|2:gapped|2:stride0",),
            records=("52d1a8930af9cdf1", "d40d4bc411400abe", "e69fcf6c8fed1898", "ee0a48f79211792e"),
            fixed_in="2.14.1",
        ),
    ),
    (
        "opinfo/nn.functional.adaptive_avg_pool2d@*",
        Known(
            "compile",
            "inductor with dynamic=True cannot lower aten._adaptive_avg_pool2d when the output size "
            "is symbolic (ints passed in by closure, as a target's arguments are): its lowering asks "
            "for the truth value of a symbolic relation (torch 2.13.0 CPU; aot_eager works)",
            "def make(size): return lambda x: F.adaptive_avg_pool2d(x, size); x = torch.randn(1, 8, 8, "
            "8, dtype=torch.float64, requires_grad=True); torch.compile(make((5, 7)), "
            "backend='inductor', dynamic=True)(x).sum().backward() -> InductorError: "
            "LoweringException: TypeError: cannot determine truth value of Relational: "
            "(((2*s4 + 6)//s4))*(((2*s90 + 6)//s90)) > 25",
            raises="InductorError",
            message=r"cannot determine truth value of Relational.*_adaptive_avg_pool2d",
            params={"backend": "inductor"},
            records=("4fe38aa0547efb89",),
            fixed_in="2.14.1",
        ),
    ),
    (
        "opinfo/nn.functional.conv2d@*",
        Known(
            "compile",
            "the catalog's strided conv2d bug on OpInfo's samples: inductor with dynamic=True cannot "
            "lower convolution_backward when the conv's stride is a symbolic int (torch 2.13.0 CPU)",
            "def conv(stride): return lambda x, w, b: F.conv2d(x, w, b, stride, [0, 0], 2); "
            "torch.compile(conv(2), backend='inductor', dynamic=True)(x, w, b).sum().backward() with "
            "x, w, b of shapes (1, 1, 3, 3), (2, 1, 1, 1), (2,) requiring grad -> InductorError: "
            "LoweringException: ValueRangeError: Invalid ranges [0:-1]",
            raises="InductorError",
            message=r"ValueRangeError: Invalid ranges \[0:-1\]",
            params={"backend": "inductor"},
        ),
    ),
    (
        "opinfo/nn.functional.conv2d@*",
        Known(
            "compile",
            "inductor with dynamic=True cannot compile an unbatched conv2d (a 3-d input) with its "
            "backward: 'cannot determine truth value of Relational' (torch 2.13.0 CPU; aot_eager and "
            "eager work)",
            "x, w = torch.randn(4, 5, 5, dtype=torch.float64, requires_grad=True), torch.randn(3, 4, 3, "
            "3, dtype=torch.float64, requires_grad=True); torch.compile(lambda x, w: F.conv2d(x, w), "
            "backend='inductor', dynamic=True)(x, w).sum().backward() -> InductorError: TypeError: "
            "cannot determine truth value of Relational: s27*s77 < s77",
            raises="InductorError",
            message=r"cannot determine truth value of Relational",
            params={"backend": "inductor"},
            records=("8199ed6aea35eab4",),
            fixed_in="2.15.0",
        ),
    ),
    (
        "opinfo/max_pool2d_with_indices_backward@*",
        Known(
            "compile",
            "with dynamic=True an int kernel_size or stride (a target's closure argument, so a "
            "SymInt under dynamo) cannot be passed to aten.max_pool2d_with_indices_backward's int[2] "
            "arguments: fake-tensor dispatch rejects the SymInt where eager broadcasts the int "
            "(torch 2.13.0 CPU; a tuple (3, 3) or dynamic=False works)",
            "def make(k, s): return lambda x: aten.max_pool2d_with_indices_backward.default("
            "torch.ones_like(o := F.max_pool2d_with_indices(x, k, s, ceil_mode=True, "
            "return_indices=True))[0], x, k, s, (0,), (1,), True, o[1]); x = torch.randn(1, 2, 3, 6, "
            "dtype=torch.float64, requires_grad=True); torch.compile(make(3, 2), backend='aot_eager', "
            "dynamic=True)(x) -> TorchRuntimeError: Expected a value of type 'List[int]' for argument "
            "'kernel_size' but instead found type 'SymInt'",
            raises="TorchRuntimeError",
            message=r"Expected a value of type 'List\[int\]' for argument '\w+' but instead found type 'SymInt'",
            records=("0c1e80e94e6d6bae",),
        ),
    ),
    (
        "opinfo/to_sparse@*",
        Known(
            "compile",
            "under AOTAutograd (aot_function, either partitioner) x.to_sparse(...).to_dense() returns "
            "the right values without a grad_fn: the gradient is lost silently (torch 2.13.0 CPU; "
            "torch's own test_aotdispatch.py xfails to_sparse; torch.compile's aot_eager is right)",
            "from functorch.compile import aot_function, nop; x = torch.randn(5, 5, "
            "dtype=torch.float64, requires_grad=True); aot_function(lambda t: "
            "t.to_sparse(1).to_dense(), fw_compiler=nop, bw_compiler=nop)(x).requires_grad -> False "
            "(eager: True)",
            message=r"^aot_function(_min_cut)? vs eager: output \d+: requires_grad False \(eager: True\)",
            params={"backend": ("aot_function", "aot_function_min_cut")},
            records=("acd465e67dc0b94f",),
            fixed_in="2.14.1",
        ),
    ),
    (
        "opinfo/view_copy@*",
        Known(
            "compile",
            "inductor cannot lower torch.view_copy of an input whose layout cannot be viewed as the "
            "new shape, where eager (a copy) and aot_eager work (torch 2.13.0 CPU; the compile "
            "counterpart of view_copy's forward-mode entry)",
            "torch.compile(lambda t: torch.view_copy(t, (25, 5)), backend='inductor')(torch.randn(5, 5, "
            "5, dtype=torch.float64).permute(0, 2, 1)) -> BackendCompilerFailed: ValueError: Cannot "
            "view a tensor with shape torch.Size([5, 5, 5]) and strides (25, 1, 5) as a tensor with "
            "shape (25, 5)!",
            raises="BackendCompilerFailed",
            message=r"Cannot view a tensor with shape .* and strides .* as a tensor with shape",
            params={"backend": "inductor"},
            records=("a70624420abc5ae4",),
        ),
    ),
    # the compile check's vmap transform, whatever the op: cov, corrcoef, kron, linalg.multi_dot,
    # linalg.norm, group_norm, upsample_nearest so far
    ("opinfo/*", VMAP_SYMBOLIC_SIZES_DYNAMIC),
    # the compile check's vmap transform of interpolate with recompute_scale_factor=True
    ("opinfo/nn.functional.interpolate.*", VMAP_UPSAMPLE_SYMINT_OUTPUT_SIZE),
    ("opinfo/nn.functional.upsample_*", VMAP_UPSAMPLE_SYMINT_OUTPUT_SIZE),
    # the compile check's dual and jvp transforms: quantile's linear and midpoint call lerp_
    *((f"opinfo/{name}@*", DUAL_LEVEL_LERP_INPLACE_COMPILE) for name in ("quantile", "nanquantile")),
    (
        "opinfo/linalg.matrix_norm@*",
        Known(
            "compile",
            "torch.compile(dynamic=True) of torch.func.jvp through torch.linalg.matrix_norm with ord "
            "2, -2 or 'nuc' fails in fake-tensor dispatch: forward AD's _new_zeros_with_same_feature_meta "
            "calls storage_offset() on a tensor with symbolic sizes (torch 2.13.0 CPU, aot_eager; "
            "ord='fro', eager and dynamic=False work)",
            "g = lambda x, u: torch.func.jvp(lambda t: torch.linalg.matrix_norm(t, -2, (-1, 0)), (x,), "
            "(u,)); x, u = (torch.randn(2, 3, 2, dtype=torch.float64) for _ in range(2)); "
            "torch.compile(g, backend='aot_eager', dynamic=True)(x, u) -> TorchRuntimeError: ... Cannot "
            "call storage_offset() on tensor with symbolic sizes/strides",
            raises="TorchRuntimeError",
            message=r"Cannot call storage_offset\(\) on tensor with symbolic sizes/strides",
            params={"backend": ("aot_eager", "inductor"), "transform": "jvp"},
            records=("965f579cee9184ae",),
            fixed_in="2.14.1",
        ),
    ),
    (
        "opinfo/fft.*",
        Known(
            "compile",
            "inductor with dynamic=True compiles the gradient of a padded FFT (s= larger than the input, so "
            "constant_pad_nd in the backward) with a transposed cotangent into code whose stride assertion "
            "fails (torch 2.13.0 CPU; a contiguous cotangent, dynamic=False, aot_eager and eager work)",
            "kw = dict(s=(3, 10), dim=(1, 2), norm='ortho'); x = torch.randn(5, 6, 7, dtype=torch.float64); "
            "v = torch.randn(5, 10, 3, dtype=torch.complex128).transpose(1, 2); g = lambda x, v: "
            "torch.func.grad(lambda d: (v.conj() * torch.fft.fft2(d, **kw)).sum().real)(x); "
            "torch.compile(g, backend='inductor', dynamic=True)(x, v) -> AssertionError: expected size 3==3, "
            "stride 1==7 at dim=1; expected size 7==7, stride 3==1 at dim=2 (torch.fft.ifftn too)",
            raises="AssertionError",
            message=r"expected size \d+==\d+, stride \d+==\d+ at dim=\d+",
            params={"backend": "inductor"},
            records=("86c6c3eee5302e87", "393944998ad2dc76"),
        ),
    ),
    (
        "opinfo/chunk@*",
        Known(
            "compile",
            "inductor with dynamic=True fails to lower torch.func.vjp of torch.chunk(x, 2) on a (5, 5, 5) "
            "input: its value-range analysis meets the empty range [0:-1] (torch 2.13.0 CPU; dynamic=False, "
            "the forward alone and torch.func.grad of the summed chunks compile)",
            "g = lambda x, *v: (lambda o, f: (o, f(tuple(v))))(*torch.func.vjp(lambda d: torch.chunk(d, 2), x)); "
            "x = torch.randn(5, 5, 5, dtype=torch.float64); v = (torch.randn(3, 5, 5, dtype=torch.float64), "
            "torch.randn(2, 5, 5, dtype=torch.float64)); torch.compile(g, backend='inductor', "
            "dynamic=True)(x, *v) -> InductorError: ValueRangeError: Invalid ranges [0:-1]",
            raises="InductorError",
            message=r"ValueRangeError: Invalid ranges \[0:-1\]",
            params={"backend": "inductor", "transform": "vjp"},
            records=("ed773267667051b8",),
            fixed_in="2.14.1",
        ),
    ),
    (
        "opinfo/frexp@*",
        Known(
            "compile",
            "inductor's C++ backend emits a vectorized float64 kernel for the derivative of "
            "torch.frexp's mantissa that does not compile: it converts the int exponent with "
            "at::vec::convert<float>, which has no overload for VectorizedN<int, 2> (torch 2.13.0 CPU, "
            "with AVX512 kernels; dynamic True or False, backward by autograd.grad, torch.func.grad or "
            "torch.func.jvp; float32, aot_eager, the forward alone and cpp.simdlen=0 work)",
            "x, v = torch.randn(20, dtype=torch.float64) * 4, torch.randn(20, dtype=torch.float64); "
            "g = lambda x, v: torch.func.grad(lambda d: (v * torch.frexp(d).mantissa).sum())(x); g(x, v) "
            "works; torch.compile(g, backend='inductor', dynamic=True)(x, v) -> InductorError: CppCompileError: C++ "
            "compile error ... error: no matching function for call to "
            "'convert<float>(at::vec::CPU_CAPABILITY::VectorizedN<int, 2>&)'",
            raises="InductorError",
            message=r"CppCompileError.*no matching function for call to .convert<float>\(\S*VectorizedN?<int\b",
            params={"backend": "inductor"},
            dtypes=("float64",),
            records=("668cd741bfea0d37",),
        ),
    ),
    # the compile check's transforms, whatever the op
    *(("opinfo/*", known) for known in MACHINERY),
    *(("opinfo/masked.*", known) for known in MASKED_OUTPUT_MASK_TRACED),
    ("opinfo/nn.functional.grid_sample@*", GRID_SAMPLE_NEAREST_COMPILED_AUTOGRAD_ALIASED),
    ("opinfo/ormqr@*", ORMQR_EMPTY_COMPILED_AUTOGRAD_ALIASED),
    ("opinfo/max_pool2d_with_indices_backward@*", LONE_SYMINT_FOR_INT_LIST),
    *(
        (f"opinfo/{name}@*", LAYER_NORM_COMPILED_AUTOGRAD_BIAS_ALIASED)
        for name in ("native_layer_norm", "nn.functional.layer_norm")
    ),
    *((f"opinfo/{name}@*", VMAP_INT_SCALAR_DYNAMIC) for name in ("addbmm", "baddbmm")),
    *(
        (f"opinfo/{name}@*", known)
        for name in ("to", "double", "float", "half", "bfloat16", "cfloat", "cdouble", "chalf")
        for known in (_CHANNELS_LAST, _CHANNELS_LAST_COMPILED)
    ),
)


def known_for(ref: str) -> tuple[Known, ...]:
    """The known discrepancies of the OpInfo target ``ref``."""
    return tuple(k for pattern, k in KNOWN if fnmatch.fnmatchcase(ref, pattern))
