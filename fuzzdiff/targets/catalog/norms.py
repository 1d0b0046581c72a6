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


def normalize(x, p, dim):
    return F.normalize(x, p, dim)


BATCH_NORM_STRIDE0_WEIGHT = (
    "eval-mode F.batch_norm on CPU returns a wrong grad_input when the weight is expanded "
    "(stride 0): channels after the first get the gradient of a zero weight (torch 2.13.0 CPU). "
    "Repro: x = torch.randn(1, 2, dtype=torch.float64, requires_grad=True); w = torch.tensor("
    "[0.75], dtype=torch.float64).expand(2).detach().requires_grad_(); y = F.batch_norm(x, "
    "torch.tensor([-0.5, 0.5]).double(), torch.tensor([0.5, 2.0]).double(), w, None, "
    "training=False); torch.autograd.grad(y, x, torch.ones_like(y)) gives [[g0, -0.0]]; with "
    "w.clone() it gives [[g0, 0.53]]. The kernel reads the weight as if contiguous, past its "
    "one-element storage (other runs give garbage such as 9.8e-310 or 3.9e228); only inputs "
    "with one value per (sample, channel), (N, C) or (N, C, 1), are affected. Found by grad "
    "(vs finite differences), forward (vs reverse) and layout (expanded vs contiguous weight) "
    "in the CI profile, and alias in the dev profile; shrunk case (grad, analytic 36.070 vs "
    'finite differences 36.121): {"target": "batch_norm", "dtype": "float64", "kwargs": '
    '{"eps": 1e-05}, "args": [{"shape": [1, 2], "values": {"seed": 0, "grid": 0.25}}, '
    '{"shape": [2], "layout": {"offset": 0, "storage_size": 1, "strides": [0]}, "values": '
    '{"seed": 0, "grid": 0.25, "constant": [0]}}, {"shape": [2], "values": {"seed": 0, '
    '"grid": 0.25}}]}')

BATCH_NORM_STRIDED_WEIGHT = (
    "the eval-mode F.batch_norm grad_input bug above is not limited to stride 0: a step-sliced "
    "weight is read as if contiguous too (torch 2.13.0 CPU). Repro: mean, var = torch.tensor("
    "[-0.5, 0.5]).double(), torch.tensor([0.5, 2.0]).double(); x = torch.tensor([[0.75, "
    "-1.25]], dtype=torch.float64, requires_grad=True); w = torch.tensor([1.5, 99.0, -0.5], "
    "dtype=torch.float64).as_strided((2,), (2,)).detach().requires_grad_(); y = F.batch_norm("
    "x, mean, var, w, None, training=False); torch.autograd.grad(y, x, torch.ones_like(y)) -> "
    "[[2.1213, 70.0034]], with w.clone() -> [[2.1213, -0.3536]] (the 99.0 between the weight's "
    "elements is read). Found by the vmap check: its per-example loop is the wrong side "
    "(vmap_vjp, unbatched weight of strides [2], CI profile).")

GROUP_NORM_FORWARD = (
    "forward-mode AD of F.group_norm raises 'RuntimeError: view size is not compatible with "
    "input tensor's size and stride (at least one dimension spans across two contiguous "
    "subspaces). Use .reshape(...) instead.' for a 4-d input that is not contiguous, e.g. "
    "channels_last, while the primal and reverse mode work (torch 2.13.0 CPU). Repro: x = "
    "torch.randn(2, 3, 2, 2, dtype=torch.float64).to(memory_format=torch.channels_last); "
    "with fwAD.dual_level(): F.group_norm(fwAD.make_dual(x, torch.randn_like(x)), 1) -> "
    "RuntimeError (a tangent only on the weight raises too). Fuzzed case (forward check): "
    '{"target": "group_norm", "dtype": "float32", "args": [{"shape": [3, 3, 3, 2], "layout": '
    '{"offset": 1, "storage_size": 746, "strides": [324, 2, 36, 18]}}, ...], "kwargs": '
    '{"num_groups": 1, "eps": 1e-05}}. gradgrad (forward-over-reverse) raises the same: '
    '{"target": "group_norm", "dtype": "float64", "args": [{"shape": [2, 2, 2, 2], "layout": '
    '{"offset": 0, "storage_size": 16, "strides": [8, 1, 4, 2]}, "values": {"seed": 0, '
    '"grid": 0.25}}, {"shape": [2]}, {"shape": [2]}], "kwargs": {"eps": 1e-05, "num_groups": 1}}')


register(
    # Degenerate groups: a group of equal values, or of one value, has zero variance;
    # a group of two values normalizes to (+-1, -+1) * sqrt(var / (var + eps)), constant
    # up to eps. Either way the derivatives in x are O(eps) results of cancelling terms
    # of size 1/sqrt(eps) (rstd^3 for second derivatives): float32 is off by up to
    # ~2e-4 absolute (layer_norm gradgrad over 2 values exceeds the float32 tolerance
    # in 12% of random points, over 3 values in none). Distinct values and groups of
    # 0 or at least 3 values keep the normalization away from that regime.
    Target("layer_norm", layer_norm, "x: *b m n, w: m n, b: m n", FAMILY, max_side=3,
           distinct=True,
           kwargs={"eps": _kw.when(lambda s: math.prod(s["w"]) not in (1, 2), EPS)}),
    # rms_norm keeps the mean: only one value (normalized to its sign) is degenerate
    Target("rms_norm", rms_norm, "x: *b n, w: n", FAMILY,
           kwargs={"eps": _kw.when(lambda s: s["w"] != (1,), EPS)}),
    # group_norm also rejects groups of one value ("Expected more than 1 value per channel
    # when training" when n * c / g * prod(s) == 1); groups() asks for three per group
    Target("group_norm", group_norm, "x: n c *s, w: c, b: c", FAMILY, min_side=1, max_side=3,
           distinct=True, kwargs={"num_groups": _kw.groups("x", 1, min_values=3), "eps": EPS},
           known={check: GROUP_NORM_FORWARD for check in ("forward", "gradgrad", "vmap")}),
    # eval-mode batch_norm with 0 channels and a non-empty batch raises
    # "IndexError: select(): index 0 out of range" (torch 2.13): min_side=1
    Target("batch_norm", batch_norm_eval, "x: n c *s, w: c, b: c", FAMILY, min_side=1, max_side=3,
           kwargs={"eps": EPS},
           known={**{check: BATCH_NORM_STRIDE0_WEIGHT
                     for check in ("grad", "forward", "gradgrad", "layout", "alias", "dtype", "device")},
                  "vmap": BATCH_NORM_STRIDED_WEIGHT}),
    # |x|^p at p=1 has a kink at 0; the norm is clamped below by eps=1e-12 (never reached
    # here). A slice of one value normalizes to its sign, a constant whose float32
    # derivatives are pure cancellation: the normalized dim holds 0 or at least 2 values.
    # Equal values along the normalized dim make its derivatives exact cancellations
    # too (a float32 false alarm with stride-0 inputs): distinct, as for group_norm.
    Target("normalize", normalize, "x: _ ...", FAMILY, kinks=(0.0,), distinct=True,
           kwargs={"p": st.sampled_from([2.0, 1.0, 3.0]), "dim": _kw.dim_with("x", lambda n: n != 1)}),
)
