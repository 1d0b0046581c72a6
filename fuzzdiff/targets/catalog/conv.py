"""Convolutions and pooling, kept tiny: batch, channels and kernel sizes up to 3.

Weight and bias shapes come from named dims (``w: o c k`` shares ``c`` with the
input). Padding is drawn per spatial dim so that the dilated kernel always
fits; a kernel longer than its (padded) input is an error, not a finding.
"""

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from fuzzdiff.targets import FromShapes, Target, register
from fuzzdiff.targets.catalog import _kw
from fuzzdiff.targets.discrepancies import EAGER_CHECKS, JVP_VIEW_AOT_FUNCTION
from fuzzdiff.targets.known import Known

FAMILY = "conv"
STRIDE = st.sampled_from([1, 2])
DILATION = st.sampled_from([1, 2])


def conv1d(x, w, b, stride, padding, dilation):
    return F.conv1d(x, w, b, stride, padding, dilation)


def conv2d(x, w, b, stride, padding, dilation):
    return F.conv2d(x, w, b, stride, padding, dilation)


def conv_transpose1d(x, w, b, stride, dilation):
    return F.conv_transpose1d(x, w, b, stride, dilation=dilation)


def avg_pool1d(x, kernel_size, stride):
    return F.avg_pool1d(x, kernel_size, stride)


def max_pool2d(x, kernel_size, stride):
    return F.max_pool2d(x, kernel_size, stride)


def kernel(arg: str, last: int):
    """A kernel size that fits into ``arg``'s last ``last`` dims."""
    return FromShapes(lambda s: st.integers(1, max(1, min(s[arg][-last:]))))


BACKWARD_CHECKS = (*EAGER_CHECKS, "compile")
CONV2D_WEIGHT_LAYOUT = Known(
    BACKWARD_CHECKS,
    "the CPU backward of F.conv2d raises when the weight is not contiguous (expanded, or a "
    "view of another layout), though the forward accepts it and its gradient is well defined "
    "(torch 2.13.0 CPU)",
    "w = torch.randn(1, 1, 1, 1, dtype=torch.float64).expand(2, 1, 2, 2).detach()"
    ".requires_grad_(); F.conv2d(torch.randn(1, 1, 3, 3, dtype=torch.float64), w).sum()"
    ".backward() -> RuntimeError: slow_conv2d: grad_weight must be contiguous",
    raises="RuntimeError",
    message=r"slow_conv2d: grad_weight must be contiguous",
    records=("105e6904593562f7",),
)
INDUCTOR_STRIDED_CONV_BACKWARD = Known(
    "compile",
    "inductor with dynamic=True cannot lower convolution_backward when the conv's stride is a "
    "symbolic int (passed in by closure or as an argument, as a target's keyword arguments are; "
    "literals compile): 'ValueRangeError: Invalid ranges [0:-1]' (torch 2.13.0 CPU; stride 2 "
    "with dilation 1 or 2 fails, stride 1 works; aot_eager works)",
    "def conv(stride): return lambda x, w, b: F.conv2d(x, w, b, stride, [0, 0], 2); x, w, b = "
    "torch.randn(1, 1, 3, 3, dtype=torch.float64, requires_grad=True), torch.randn(2, 1, 1, 1, "
    "dtype=torch.float64, requires_grad=True), torch.randn(2, dtype=torch.float64, "
    "requires_grad=True); torch.compile(conv(2), backend='inductor', dynamic=True)(x, w, b).sum()"
    ".backward() -> InductorError: LoweringException: ValueRangeError: Invalid ranges [0:-1] "
    "target: aten.convolution_backward.default",
    raises="InductorError",
    message=r"ValueRangeError: Invalid ranges \[0:-1\]",
    params={"backend": "inductor", "kwargs.stride": 2},
    records=("3da4b2e534582a0b",),
    fixed_in="2.14.1",
)
INDUCTOR_VMAP_CONV_STRIDES = Known(
    "compile",
    "inductor's compile of vmap(F.conv2d) with stride 2 and dilation 2 asserts that the "
    "convolution's real output strides differ from its fake kernel's (\"expected size 2==2, "
    'stride 2==1 at dim=1"; torch 2.13.0 CPU, dynamic=True; eager vmap works)',
    "fuzzdiff repro 83a46fd52205f614: torch.compile(torch.func.vmap(lambda x, w, b: F.conv2d(x, w, "
    "b, stride=2, padding=[0, 3], dilation=2), in_dims=(0, 0, 0)), backend='inductor', "
    "dynamic=True) on x (2, 2, 1, 1, 1), w (2, 1, 1, 1, 3), b (2, 1) -> AssertionError: expected "
    "size 2==2, stride 2==1 at dim=1 ... Error in op: torch.ops.aten.convolution.default",
    raises="AssertionError",
    message=r"expected size \d+==\d+, stride \d+==\d+ at dim=\d+",
    params={"backend": "inductor", "transform": "vmap"},
    records=("83a46fd52205f614",),
)
CONV_TRANSPOSE1D_LAYOUT = Known(
    BACKWARD_CHECKS,
    "the CPU backward of F.conv_transpose1d raises for an input and weight whose layouts "
    "differ from contiguous only through size-1 dims and one swapped pair, while the forward "
    "accepts them (torch 2.13.0 CPU; x contiguous, or larger channels-last layouts, work)",
    "w = torch.randn(4, dtype=torch.float64).as_strided((1, 2, 2), (1, 1, 2)).detach()"
    ".requires_grad_(); x = torch.randn(2, dtype=torch.float64).as_strided((1, 1, 2), "
    "(2, 1, 1)); F.conv_transpose1d(x, w).sum().backward() -> RuntimeError: grad_weight needs "
    "to be contiguous",
    raises="RuntimeError",
    message=r"grad_weight needs to be contiguous",
)
CONV2D = "x: n c h v, w: o c kh kv, b: o"
# Not a `known` entry: it crashes the process, so no check can report it.
CONV2D_SEGFAULT = (
    "F.conv2d segfaults on CPU in float32 with a channels_last input, a bias, stride 2 and "
    "dilation 2 (torch 2.13.0): x = torch.randn(2, 2, 3, 1).contiguous(memory_format="
    "torch.channels_last); w = torch.randn(1, 2, 1, 1); b = torch.randn(1); F.conv2d(x, w, b, "
    "2, 1, 2) -> Segmentation fault (float64, dilation 1, stride 1, no bias, or batch 1 run)."
)
# Not a `known` entry either: the fault breaks the process's CUDA context, so every later
# CUDA call in that pytest worker fails too. max_pool2d is fuzzed on the CPU only.
MAX_POOL2D_CUDA_MISALIGNED = (
    "F.max_pool2d(x, 1, 2) on CUDA in float64 faults with 'CUDA error: misaligned address' "
    "(sticky: the process's CUDA context is lost) for a one-channel input whose strides are "
    "not dense, e.g. x = torch.randn(37, dtype=torch.float64, device='cuda').as_strided("
    "(3, 1, 2, 2), (12, 1, 6, 1), 5) (torch 2.11.0+cu130, H100; the same values contiguous "
    "or channels_last run). Found by the layout and device checks on an H100; "
    "corpus/layout/max_pool2d."
)


register(
    Target(
        "conv1d",
        conv1d,
        "x: n c l, w: o c k, b: o",
        FAMILY,
        min_side=1,
        max_side=3,
        kwargs={"stride": STRIDE, "padding": _kw.conv_padding("x", "w", 1), "dilation": DILATION},
    ),
    # stride 2 with dilation 2 segfaults in float32 (CONV2D_SEGFAULT): a crash kills the
    # worker and cannot be an xfail, so that pair is fuzzed in float64 only
    Target(
        "conv2d",
        conv2d,
        CONV2D,
        FAMILY,
        min_side=1,
        max_side=3,
        kwargs={"stride": STRIDE, "padding": _kw.conv_padding("x", "w", 2), "dilation": 1},
        known=(CONV2D_WEIGHT_LAYOUT, INDUCTOR_STRIDED_CONV_BACKWARD),
    ),
    Target(
        "conv2d_dilated",
        conv2d,
        CONV2D,
        FAMILY,
        min_side=1,
        max_side=3,
        kwargs={"stride": 1, "padding": _kw.conv_padding("x", "w", 2), "dilation": 2},
        known=(CONV2D_WEIGHT_LAYOUT,),
    ),
    Target(
        "conv2d_strided_dilated",
        conv2d,
        CONV2D,
        FAMILY,
        min_side=1,
        max_side=3,
        dtypes=(torch.float64,),
        kwargs={"stride": 2, "padding": _kw.conv_padding("x", "w", 2), "dilation": 2},
        known=(CONV2D_WEIGHT_LAYOUT, INDUCTOR_STRIDED_CONV_BACKWARD, INDUCTOR_VMAP_CONV_STRIDES),
    ),
    Target(
        "conv_transpose1d",
        conv_transpose1d,
        "x: n c l, w: c o k, b: o",
        FAMILY,
        min_side=1,
        max_side=3,
        kwargs={"stride": STRIDE, "dilation": DILATION},
        known=(CONV_TRANSPOSE1D_LAYOUT,),
    ),
    Target(
        "avg_pool1d",
        avg_pool1d,
        "x: n c l",
        FAMILY,
        min_side=1,
        kwargs={"kernel_size": kernel("x", 1), "stride": STRIDE},
        known=(JVP_VIEW_AOT_FUNCTION,),
    ),
    # overlapping windows (stride 1) take the max of shared values: distinct
    Target(
        "max_pool2d",
        max_pool2d,
        "x: n c h v",
        FAMILY,
        min_side=1,
        max_side=3,
        distinct=True,
        kwargs={"kernel_size": kernel("x", 2), "stride": STRIDE},
        cpu_only=MAX_POOL2D_CUDA_MISALIGNED,
    ),
)
