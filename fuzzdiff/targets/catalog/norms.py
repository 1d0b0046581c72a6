"""Normalization layers: weights and biases named by the dims they scale.

batch_norm runs in eval mode with running statistics that ``fn`` builds from
the channel count (constants, not inputs), so the case stays plain data.
"""

import math

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from fuzzdiff.targets import Target, register
from fuzzdiff.targets.catalog import _kw
from fuzzdiff.targets.discrepancies import (
    EAGER_CHECKS,
    GROUP_NORM_COMPILED_AUTOGRAD_ORDER2,
    GROUP_NORM_VMAP_GAPPED_BATCH,
    JVP_TANGENT_COPY_DYNAMIC,
    LAYER_NORM_COMPILED_AUTOGRAD_BIAS_ALIASED,
    LAYER_NORM_JACREV,
    NESTED_JVP_NORMS,
    REVERSE_OVER_FORWARD_INPLACE,
    VMAP_SYMBOLIC_SIZES_DYNAMIC,
)
from fuzzdiff.targets.known import Known

FAMILY = "norms"
EPS = st.sampled_from([1e-5, 0.1])


def layer_norm(x, w, b, eps):
    return F.layer_norm(x, w.shape, w, b, eps)


def rms_norm(x, w, eps):
    return F.rms_norm(x, w.shape, w, eps)


def group_norm(x, w, b, num_groups, eps):
    return F.group_norm(x, num_groups, w, b, eps)


def batch_norm_eval(x, w, b, eps):
    c = x.shape[1]
    mean = torch.linspace(-0.5, 0.5, c, dtype=x.dtype, device=x.device)
    var = torch.linspace(0.5, 2.0, c, dtype=x.dtype, device=x.device)
    return F.batch_norm(x, mean, var, w, b, training=False, eps=eps)


def local_response_norm_3d(x, size):
    """F.local_response_norm of a volume (N, C, D, H, W): its code for five
    and more dims merges the trailing ones with a view."""
    return F.local_response_norm(x, size)


# Found by the ModuleInfo target modules/nn.LocalResponseNorm_2; upstream: none found.
LOCAL_RESPONSE_NORM_5D_VIEW = Known(
    EAGER_CHECKS + ("vmap", "compile", "compiled_autograd", "export"),
    "F.local_response_norm of an input of five or more dims whose last two dims are not laid out "
    "one inside the other (a transpose of them, a permutation, vmap's batch dim among them) raises: "
    "it merges them with "
    "div.view(n, 1, c, d, -1) where reshape belongs (torch 2.13.0 CPU; the same values contiguous, "
    "and any 4-d layout, work)",
    "x = torch.randn(1, 5, 7, 7, 7, dtype=torch.float64).transpose(3, 4); "
    "F.local_response_norm(x, 3) -> RuntimeError: view size is not compatible with input tensor's "
    "size and stride (at least one dimension spans across two contiguous subspaces); "
    "F.local_response_norm(x.contiguous(), 3) runs",
    raises="RuntimeError",
    message=r"view size is not compatible with input tensor's size and stride",
    records=("efacb11c0e3806c4",),
)


def normalize(x, p, dim):
    return F.normalize(x, p, dim)


# The weight (argument 1) in a layout that is not dense: expanded, sliced with
# a step, or a view of another argument's storage.
_STRIDED_WEIGHT = ("1:stride0|1:gapped|1:permuted",)

BATCH_NORM_STRIDED_WEIGHT = Known(
    ("grad", "forward", "gradgrad", "layout", "alias", "dtype", "device", "vmap", "forward2"),
    "eval-mode F.batch_norm on CPU returns a wrong grad_input when the weight is not dense "
    "(expanded, or sliced with a step): the kernel reads the weight as if contiguous, past its "
    "elements (other runs give garbage such as 9.8e-310 or 3.9e228); only inputs with one value "
    "per (sample, channel), (N, C) or (N, C, 1), are affected (torch 2.13.0 CPU)",
    "x = torch.randn(1, 2, dtype=torch.float64, requires_grad=True); w = torch.tensor([0.75], "
    "dtype=torch.float64).expand(2).detach().requires_grad_(); y = F.batch_norm(x, "
    "torch.tensor([-0.5, 0.5]).double(), torch.tensor([0.5, 2.0]).double(), w, None, "
    "training=False); torch.autograd.grad(y, x, torch.ones_like(y)) gives [[g0, -0.0]], with "
    "w.clone() [[g0, 0.53]]; a step-sliced weight, torch.tensor([1.5, 99.0, -0.5], "
    "dtype=torch.float64).as_strided((2,), (2,)), gives [[2.1213, 70.0034]] instead of "
    "[[2.1213, -0.3536]] (the 99.0 between its elements is read)",
    features=_STRIDED_WEIGHT,
    records=("7dce7b87f07391a5", "86d88f033270e811", "9aa92962f112b240", "d65dcdb06dafbf56", "442af2704fb21f07"),
)

BATCH_NORM_STRIDED_WEIGHT_AOT = Known(
    "compile",
    "the strided-weight batch_norm kernel bug above, reached by aot_function for an input of "
    "shape (N, C, 1, 1), where eager is right: AOTAutograd's traced backward calls the native "
    "kernel with the step-sliced weight, which it reads as if contiguous (torch 2.13.0 CPU)",
    "g = lambda x, w: F.batch_norm(x, torch.tensor([-.5, .5]).double(), torch.tensor([.5, "
    "2.]).double(), w, None, training=False); x = torch.randn(1, 2, 1, 1, dtype=torch.float64, "
    "requires_grad=True); w = torch.tensor([1.5, 99.0, -0.5]).double().as_strided((2,), (2,))"
    ".detach().requires_grad_(); the gradient of aot_function(g, fw_compiler=nop, "
    "bw_compiler=nop)(x, w).sum() with respect to x is [2.1213, 70.0034], eager's [2.1213, "
    "-0.3536] (the 99.0 between the weight's elements is read)",
    message=r"^aot_function(_min_cut)? vs eager: grad \d+ at",
    features=_STRIDED_WEIGHT,
    params={"backend": ("aot_function", "aot_function_min_cut")},
    records=("3b82746acab4a1e8",),
)

BATCH_NORM_STRIDED_WEIGHT_EAGER = Known(
    "compile",
    "the strided-weight batch_norm kernel bug above, on the compile check's eager side: eager's "
    "grad_input reads memory past the stride-0 weight (garbage, another value each run), where "
    "inductor, which does not call the native backward kernel, gives the dense weight's gradient "
    "(torch 2.13.0 CPU, dynamic True or False; aot_eager calls the kernel and reads garbage too)",
    "g = lambda x, w, b: F.batch_norm(x, torch.tensor([-.5, .5]).double(), torch.tensor([.5, "
    "2.]).double(), w, b, training=False); x = torch.tensor([[0.5, -1.25]], dtype=torch.float64, "
    "requires_grad=True); w = torch.tensor([0.75]).double().expand(2).detach().requires_grad_(); "
    "b = torch.tensor([0.25, 1.0]).double().requires_grad_(); v = torch.tensor([[1.5, -2.0]]).double(); "
    "torch.autograd.grad(g(x, w, b), x, v) -> [[1.5910, -2.0e-240]] (or -9.8e-310), with w.clone() "
    "and under torch.compile(g, backend='inductor') [[1.5910, -1.0607]]; the compile check's "
    "grad transform, torch.func.grad of <v, f> compiled whole, meets the same eager kernel",
    message=r"^(aot_eager|inductor)(, grad\(<v, f>\))? vs eager: grad \d+ at",
    features=_STRIDED_WEIGHT,
    params={"backend": ("aot_eager", "inductor")},
    records=("16696c7ae864d554",),
)

BATCH_NORM_STRIDED_WEIGHT_CHANNELS_LAST = Known(
    "compiled_autograd",
    "eval-mode native_batch_norm_backward reads a step-sliced weight as if contiguous when "
    "grad_output is channels last (its channels-last CPU kernel), for inputs of any spatial size: "
    "eager autograd hands it the contiguous cotangent and is right, while a forward compiled by "
    "torch.compile (aot_eager) passes a channels-last grad_output of a channels-last input and gets "
    "the weight's gaps (torch 2.13.0 and 2.15.0 CPU; a contiguous weight is right; upstream: none found)",
    "d = torch.float64; x = torch.randn(2, 3, 2, 2, dtype=d).contiguous(memory_format=torch.channels_last); "
    "go = torch.randn(2, 3, 2, 2, dtype=d).contiguous(memory_format=torch.channels_last); "
    "w = torch.tensor([1.5, 99.0, -0.5, 7.0, 2.0], dtype=d)[::2]; bw = lambda w: "
    "torch.ops.aten.native_batch_norm_backward(go, x, w, torch.zeros(3, dtype=d), torch.ones(3, dtype=d), "
    "None, None, False, 1e-5, [True, False, False])[0]; bw(w)[0, 1, 0, 0] is 99.0 * go[0, 1, 0, 0] "
    "(45.59 at seed 0), bw(w.contiguous())[0, 1, 0, 0] is -0.5 * go[0, 1, 0, 0]",
    message=(
        r"^a compiled forward \(aot_eager\), backward under compiled autograd \(\w+\) vs eager: "
        r"gradients: grad \d+ at"
    ),
    features=_STRIDED_WEIGHT,
    params={"forward": "aot_eager"},
    records=("f71374609a7d196c",),
)

BATCH_NORM_DOUBLE_BACKWARD_LAYOUT = Known(
    ("gradgrad", "forward2"),
    "eval-mode F.batch_norm's double backward is wrong for an input of shape (1, 2, 1, 2) "
    "stored with strides (4, 1, 1, 2) (channels last, with a size-1 spatial dim): the "
    "derivative of grad_input with respect to the weight has entries swapped; the same "
    "values contiguous pass (torch 2.13.0 CPU)",
    "bn = lambda x, w: F.batch_norm(x, torch.linspace(-0.5, 0.5, 2).double(), "
    "torch.linspace(0.5, 2.0, 2).double(), w, None, training=False); x = torch.randn(4, "
    "dtype=torch.float64).as_strided((1, 2, 1, 2), (4, 1, 1, 2)).requires_grad_(); w = "
    "torch.randn(2, dtype=torch.float64, requires_grad=True); "
    "torch.autograd.gradgradcheck(bn, (x, w)) -> GradcheckError: Jacobian mismatch for output 0 "
    "with respect to input 1; with x.detach().contiguous().requires_grad_() it passes",
    message=r"vs finite differences of J\^T v|^<w, d2f\[u, u'\]> (forward|reverse)-over-reverse vs finite differences",
    features=("0:permuted",),
    records=("61329f797982413e", "f39f31f9e8d22b5c"),
)

BATCH_NORM_BACKWARD_SIZE1_CHANNELS_LAST = Known(
    ("grad", "forward", "layout"),
    "eval-mode F.batch_norm's backward on CPU reads a contiguous grad_output as if it had the "
    "input's layout when the input is channels last with a size-1 spatial dim whose stride is "
    "not the dense one (shape (1, 2, 2, 1), strides (4, 1, 2, 1); or (1, 2, 1, 2), strides "
    "(2, 1, 4, 2)): grad_input has cotangent entries swapped; strides (4, 1, 2, 2) are right "
    "(torch 2.13.0 CPU). Forward mode and finite differences agree with each other, reverse "
    "mode does not, and the layout check sees grad_input change with the input's layout",
    "x = torch.arange(4.).double().as_strided((1, 2, 2, 1), (4, 1, 2, 1)).requires_grad_(); "
    "y = F.batch_norm(x, torch.tensor([-.5, .5]).double(), torch.tensor([.5, 2.]).double(), "
    "torch.tensor([1.5, -.75]).double(), torch.zeros(2).double(), training=False); "
    "v = torch.arange(1., 5.).double().reshape(1, 2, 2, 1); torch.autograd.grad(y, x, v)[0] is "
    "[2.12, 6.36, -1.06, -2.12], v * w / sqrt(var + eps) is [2.12, 4.24, -1.59, -2.12]",
    message=r"^(<J\^T v, u> vs finite differences|<v, J u> \(forward\) vs <J\^T v, u> \(reverse\)"
    r"|fuzzed layout vs another layout: grad 0 at)",
    features=("0:permuted", "0:size1"),
    records=("fc706557b92eb442", "990c801b4fc0c53d"),
)

GROUP_NORM_FORWARD = Known(
    ("forward", "gradgrad", "vmap", "forward2"),
    "forward-mode AD of F.group_norm raises for a 4-d input that is not contiguous, e.g. "
    "channels_last, while the primal and reverse mode work (torch 2.13.0 CPU; a tangent only "
    "on the weight raises too; gradgrad's forward-over-reverse and vmap's jvp compositions "
    "reach it as well, and so do forward2's forward-mode identities)",
    "x = torch.randn(2, 3, 2, 2, dtype=torch.float64).to(memory_format=torch.channels_last); "
    "with fwAD.dual_level(): F.group_norm(fwAD.make_dual(x, torch.randn_like(x)), 1) -> "
    "RuntimeError: view size is not compatible with input tensor's size and stride (at least "
    "one dimension spans across two contiguous subspaces). Use .reshape(...) instead.",
    raises="RuntimeError",
    message=r"view size is not compatible with input tensor's size and stride",
    records=("035f536cab13b86e", "9572af2a0e94aaf0", "af1c4025238f8a78"),
    fixed_in="2.14.1",
)
GROUP_NORM_FORWARD_COMPILE = Known(
    "compile",
    "the forward-mode bug of F.group_norm above, met by the compile check's eager side when it feeds dual "
    "tensors or runs torch.func.jvp (torch 2.13.0 CPU)",
    "x = torch.randn(1, 2, 1, 2, dtype=torch.float64).as_strided((1, 2, 1, 2), (4, 1, 4, 2)); "
    "with fwAD.dual_level(): F.group_norm(fwAD.make_dual(x, torch.randn(1, 2, 1, 2, dtype=torch.float64)), 1) "
    "-> RuntimeError: view size is not compatible with input tensor's size and stride",
    raises="RuntimeError",
    message=r"view size is not compatible with input tensor's size and stride",
    params={"transform": ("dual", "jvp")},
    records=("eff2a30ed78886e4",),
    fixed_in="2.14.1",
)


register(
    # Degenerate groups: a group of equal values, or of one value, has zero variance;
    # a group of two values normalizes to (+-1, -+1) * sqrt(var / (var + eps)), constant
    # up to eps. Either way the derivatives in x are O(eps) results of cancelling terms
    # of size 1/sqrt(eps) (rstd^3 for second derivatives): float32 is off by up to
    # ~2e-4 absolute (layer_norm gradgrad over 2 values exceeds the float32 tolerance
    # in 12% of random points, over 3 values in none). Distinct values and groups of
    # 0 or at least 3 values keep the normalization away from that regime.
    Target(
        "layer_norm",
        layer_norm,
        "x: *b m n, w: m n, b: m n",
        FAMILY,
        max_side=3,
        distinct=True,
        structured=("large", "offset"),
        kwargs={"eps": _kw.when(lambda s: math.prod(s["w"]) not in (1, 2), EPS)},
        known=(NESTED_JVP_NORMS, LAYER_NORM_JACREV, LAYER_NORM_COMPILED_AUTOGRAD_BIAS_ALIASED),
    ),
    Target(
        "local_response_norm_3d",
        local_response_norm_3d,
        "x: n c d h w",
        FAMILY,
        max_side=3,
        kwargs={"size": st.integers(1, 3)},
        known=(LOCAL_RESPONSE_NORM_5D_VIEW,),
    ),
    # rms_norm keeps the mean: only one value (normalized to its sign) is degenerate
    Target(
        "rms_norm",
        rms_norm,
        "x: *b n, w: n",
        FAMILY,
        structured=("large",),
        kwargs={"eps": _kw.when(lambda s: s["w"] != (1,), EPS)},
    ),
    # group_norm also rejects groups of one value ("Expected more than 1 value per channel
    # when training" when n * c / g * prod(s) == 1); groups() asks for three per group
    Target(
        "group_norm",
        group_norm,
        "x: n c *s, w: c, b: c",
        FAMILY,
        min_side=1,
        max_side=3,
        distinct=True,
        kwargs={"num_groups": _kw.groups("x", 1, min_values=3), "eps": EPS},
        known=(
            GROUP_NORM_FORWARD,
            GROUP_NORM_FORWARD_COMPILE,
            GROUP_NORM_COMPILED_AUTOGRAD_ORDER2,
            GROUP_NORM_VMAP_GAPPED_BATCH,
            JVP_TANGENT_COPY_DYNAMIC,
            VMAP_SYMBOLIC_SIZES_DYNAMIC,
        ),
    ),
    # eval-mode batch_norm with 0 channels and a non-empty batch raises
    # "IndexError: select(): index 0 out of range" (torch 2.13): min_side=1
    Target(
        "batch_norm",
        batch_norm_eval,
        "x: n c *s, w: c, b: c",
        FAMILY,
        min_side=1,
        max_side=3,
        kwargs={"eps": EPS},
        known=(
            BATCH_NORM_STRIDED_WEIGHT,
            BATCH_NORM_STRIDED_WEIGHT_AOT,
            BATCH_NORM_STRIDED_WEIGHT_EAGER,
            BATCH_NORM_STRIDED_WEIGHT_CHANNELS_LAST,
            BATCH_NORM_DOUBLE_BACKWARD_LAYOUT,
            BATCH_NORM_BACKWARD_SIZE1_CHANNELS_LAST,
        ),
    ),
    # |x|^p at p=1 has a kink at 0; the norm is clamped below by eps=1e-12 (never reached
    # here). A slice of one value normalizes to its sign, a constant whose float32
    # derivatives are pure cancellation: the normalized dim holds 0 or at least 2 values.
    # Equal values along the normalized dim make its derivatives exact cancellations
    # too (a float32 false alarm with stride-0 inputs): distinct, as for group_norm.
    Target(
        "normalize",
        normalize,
        "x: _ ...",
        FAMILY,
        op="torch.nn.functional.normalize",
        kinks=(0.0,),
        distinct=True,
        structured=("large", "offset"),
        kwargs={"p": st.sampled_from([2.0, 1.0, 3.0]), "dim": _kw.dim_with("x", lambda n: n != 1)},
        known=(REVERSE_OVER_FORWARD_INPLACE,),
    ),
    # A normalized dim of one value, where hand-written formulas divide zero by zero: x
    # minus its mean is zero whatever x, so the output is the bias (layer_norm) or the
    # sign (normalize) and every derivative in x is exactly zero. In float32 those zeros
    # are cancellations of terms of size 1/sqrt(eps) (see layer_norm above): float64 only.
    Target(
        "layer_norm_size1",
        layer_norm,
        "x: *b 1, w: 1, b: 1",
        FAMILY,
        dtypes=(torch.float64,),
        kwargs={"eps": EPS},
        known=(NESTED_JVP_NORMS, LAYER_NORM_JACREV, LAYER_NORM_COMPILED_AUTOGRAD_BIAS_ALIASED),
    ),
    Target(
        "normalize_size1",
        normalize,
        "x: *b 1 n",
        FAMILY,
        op="torch.nn.functional.normalize",
        kinks=(0.0,),
        dtypes=(torch.float64,),
        kwargs={"p": st.sampled_from([2.0, 1.0, 3.0]), "dim": -2},
        known=(REVERSE_OVER_FORWARD_INPLACE,),
    ),
)
