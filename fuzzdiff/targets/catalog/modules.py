"""nn.Modules, for per-sample gradients (the per_sample check).

Each target is one module kind, declared like an op: the spec is ONE sample
(the check stacks a batch of 1 to 8 of them), the keyword arguments are the
module's hyperparameters, drawn per case, plus ``seed``, from which the
parameters are drawn. ``fn(*sample, **kwargs)`` is the module on a batch of one
(fuzzdiff.targets.module.one_sample); ``Target.module`` builds the module itself,
which is what marks a target as a module target. Parameters lie on a 1/64
grid in [-1, 1], exact in float32 and float64, so a float64 recomputation and
the dtype check see the very same module; modules are built on the meta
device, so building one never draws from torch's global generator.

The other checks run on the per-sample function of the input: layout and
mutation on every kind (cheap), grad and dtype on nn.RNN/LSTM/GRU (in no
other catalog target) and grad on nn_shared_linear; the rest are skipped
with reasons (SKIP, COVERED): their functional ops have catalog targets.
"""

import math
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st
from torch import nn

from fuzzdiff.targets import FromShapes, Index, Target, register
from fuzzdiff.targets.catalog import _kw
from fuzzdiff.targets.discrepancies import NESTED_JVP_NORMS
from fuzzdiff.targets.known import NOT_NONE, Known
from fuzzdiff.targets.module import one_sample

FAMILY = "modules"
SEED = st.integers(0, 2**16 - 1)
SIZE = st.integers(1, 3)
EPS = st.sampled_from([1e-5, 0.1])
FLAG = st.booleans()

SKIP = {
    "forward": "forward-mode AD of these ops is fuzzed by their functional catalog targets "
    "(conv1d, layer_norm, group_norm, ...), with the weights as fuzzed arguments too",
    "gradgrad": "double backward of these ops is fuzzed by their functional catalog targets; "
    "through a module it costs a module build per evaluation and no new code path",
    "alias": "one floating input: nothing to alias but a view of its own storage, which the layout check covers",
    "vmap": "vmap of the module (vmap over grad with functional_call) is the per_sample check's "
    "third path, compared there against a loop and ExpandedWeights",
    "compile": "a fresh module per call would recompile at every example: too slow for CI",
    "compiled_autograd": "a fresh module per call would recompile at every example, as for compile",
    "export": "the call builds its module (on the meta device, then to_empty) inside the code export "
    "traces with fake tensors, where to_empty cannot swap the parameters in (_apply(): Couldn't swap "
    "Conv1d.weight): the fuzzdiff target's construction, not the module; the ModuleInfo family exports "
    "modules built outside the call",
    "opcheck": "not a custom op",
}
# The kinds whose functional op has a catalog target skip grad and dtype too:
# there the weights are fuzzed arguments as well, and here they cost a module
# build per evaluation (grad of nn_conv_block took 96 s of a loaded CI run).
# The recurrent kinds, in no other catalog target, keep both; nn_shared_linear keeps grad.
COVERED = {
    **SKIP,
    "grad": "the input gradient of this op is fuzzed by its functional catalog target "
    "(weights as fuzzed arguments too), and compared here by per_sample against "
    "a loop and vmap",
    "dtype": "float32 vs float64 of this op is fuzzed by its functional catalog target; "
    "per_sample confirms its float32 mismatches in float64",
}
NO_DTYPE = {**SKIP, "dtype": COVERED["dtype"]}


def seeded(module, like, seed):
    """``module`` (built on the meta device) materialized in ``like``'s dtype,
    every parameter drawn from ``seed`` on a 1/64 grid in [-1, 1], one after
    another from one stream (the same under every torch)."""
    module = module.to_empty(device=like.device).to(like.dtype)
    start = 0
    with torch.no_grad():
        for p in module.parameters():
            values = torch.tensor(grid_parameters(seed, start, p.numel()), dtype=torch.float64)
            p.copy_(values.reshape(p.shape))
            start += p.numel()
    return module


_MASK64 = 0xFFFF_FFFF_FFFF_FFFF
_PARAMETERS = 3 << 56  # fuzzdiff.case.draws.PARAMETERS's offset of the seed


def grid_parameters(seed: int, start: int, n: int) -> list[float]:
    """Values ``start .. start + n - 1`` of the parameter stream:
    ``draws.integers(draws.words(seed, n, draws.PARAMETERS, start), -64, 64) / 64``,
    written in plain Python (splitmix64): a standalone script copies this
    function, and needs only torch."""
    out = []
    for i in range(start, start + n):
        z = (seed + _PARAMETERS + (i + 1) * 0x9E3779B97F4A7C15) & _MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        z ^= z >> 31
        out.append((((z >> 32) * 129 >> 32) - 64) / 64)
    return out


# -- one builder and one per-sample function per module kind --------------------------


def linear_module(x, out_features, bias, seed):
    return seeded(nn.Linear(x.shape[-1], out_features, bias, device="meta"), x, seed)


def linear(x, **kwargs):
    return one_sample(linear_module(x, **kwargs), x)


def conv_module(x, out_per_group, groups, geometry, bias, seed):
    """Conv1d, Conv2d or Conv3d by the sample's rank (channels first)."""
    conv = (nn.Conv1d, nn.Conv2d, nn.Conv3d)[x.dim() - 2]
    return seeded(
        conv(x.shape[0], groups * out_per_group, groups=groups, bias=bias, device="meta", **geometry), x, seed
    )


def conv(x, **kwargs):
    return one_sample(conv_module(x, **kwargs), x)


class ScaledEmbedding(nn.Module):
    """An embedding weighted per position: indices cannot carry a gradient,
    the float weights can (and make the input-gradient path testable)."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx):
        super().__init__()
        self.embedding = nn.Embedding(num_embeddings, embedding_dim, padding_idx, device="meta")

    def forward(self, x, s):
        return self.embedding(x) * s.unsqueeze(-1)


def embedding_module(x, s, extra_rows, embedding_dim, seed, padding_idx=None):
    return seeded(ScaledEmbedding(x.shape[-1] + extra_rows, embedding_dim, padding_idx), s, seed)


def embedding(x, s, **kwargs):
    return one_sample(embedding_module(x, s, **kwargs), x, s)


def layer_norm_module(x, normalized, elementwise_affine, bias, eps, seed):
    """LayerNorm over the sample's last ``normalized`` dims."""
    return seeded(nn.LayerNorm(x.shape[x.dim() - normalized :], eps, elementwise_affine, bias, device="meta"), x, seed)


def layer_norm(x, **kwargs):
    return one_sample(layer_norm_module(x, **kwargs), x)


def group_norm_module(x, num_groups, affine, eps, seed):
    return seeded(nn.GroupNorm(num_groups, x.shape[0], eps, affine, device="meta"), x, seed)


def group_norm(x, **kwargs):
    return one_sample(group_norm_module(x, **kwargs), x)


def instance_norm_module(x, affine, eps, seed):
    """InstanceNorm1d, 2d or 3d by the sample's rank (channels first)."""
    norm = (nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d)[x.dim() - 2]
    return seeded(norm(x.shape[0], eps, affine=affine, device="meta"), x, seed)


def instance_norm(x, **kwargs):
    return one_sample(instance_norm_module(x, **kwargs), x)


def recurrent_module(x, cell, hidden_size, num_layers, bias, batch_first, bidirectional, seed, nonlinearity="tanh"):
    """nn.RNN, nn.LSTM or nn.GRU over a sample of shape (sequence, features)."""
    options = {"nonlinearity": nonlinearity} if cell == "RNN" else {}
    module = getattr(nn, cell)(
        x.shape[-1],
        hidden_size,
        num_layers,
        bias=bias,
        batch_first=batch_first,
        bidirectional=bidirectional,
        device="meta",
        **options,
    )
    return seeded(module, x, seed)


def recurrent(x, **kwargs):
    return one_sample(recurrent_module(x, **kwargs), x)


class SharedLinear(nn.Module):
    """One Linear used twice: its per-sample gradient sums both uses."""

    def __init__(self, features, bias):
        super().__init__()
        self.linear = nn.Linear(features, features, bias, device="meta")

    def forward(self, x):
        return self.linear(torch.tanh(self.linear(x)))


def shared_linear_module(x, bias, seed):
    return seeded(SharedLinear(x.shape[-1], bias), x, seed)


def shared_linear(x, **kwargs):
    return one_sample(shared_linear_module(x, **kwargs), x)


class ConvBlock(nn.Module):
    """Conv1d ('same'), GroupNorm, tanh, mean over the length, Linear."""

    def __init__(self, channels, kernel_size, num_groups):
        super().__init__()
        self.conv = nn.Conv1d(channels, 4, kernel_size, padding="same", device="meta")
        self.norm = nn.GroupNorm(num_groups, 4, device="meta")
        self.linear = nn.Linear(4, 2, device="meta")

    def forward(self, x):
        return self.linear(torch.tanh(self.norm(self.conv(x))).mean(-1))


def conv_block_module(x, kernel_size, num_groups, seed):
    return seeded(ConvBlock(x.shape[0], kernel_size, num_groups), x, seed)


def conv_block(x, **kwargs):
    return one_sample(conv_block_module(x, **kwargs), x)


# each module target's builder (Target.module): what makes it a module target
BUILDERS: dict[Callable[..., Any], Callable[..., nn.Module]] = {
    linear: linear_module,
    conv: conv_module,
    embedding: embedding_module,
    layer_norm: layer_norm_module,
    group_norm: group_norm_module,
    instance_norm: instance_norm_module,
    recurrent: recurrent_module,
    shared_linear: shared_linear_module,
    conv_block: conv_block_module,
}


# -- hyperparameter strategies that depend on the drawn sample shape -------------------


@st.composite
def _geometry(draw, sizes):
    """kernel_size, stride, padding (an int, 'same' or 'valid') and dilation
    that fit: the dilated kernel is never longer than the padded input;
    'same' only with stride 1 (torch rejects it otherwise, before any ExpandedWeight)."""
    padding = draw(st.sampled_from(["valid", 0, 1, "same"]))
    dilation = draw(st.sampled_from([1, 2]))
    stride = 1 if padding == "same" else draw(st.sampled_from([1, 2]))
    pad = padding if isinstance(padding, int) else 0
    longest = [3 if padding == "same" else min(3, (n + 2 * pad - 1) // dilation + 1) for n in sizes]
    kernel = [draw(st.integers(1, k)) for k in longest]
    return {"kernel_size": kernel, "stride": stride, "padding": padding, "dilation": dilation}


GEOMETRY = FromShapes(lambda s: _geometry(s["x"][1:]))


def _normalized(shapes):
    """How many trailing dims LayerNorm normalizes: at least 3 values (over one
    or two, the normalized output is constant up to eps, and its derivatives
    are cancellations that float32 cannot resolve)."""
    x = shapes["x"]
    options = [k for k in range(1, len(x) + 1) if math.prod(x[len(x) - k :]) >= 3]
    return st.sampled_from(options) if options else st.nothing()


CONV = {
    "out_per_group": st.integers(1, 2),
    "groups": _kw.divisor("x", 0),
    "geometry": GEOMETRY,
    "bias": FLAG,
    "seed": SEED,
}
RECURRENT = {
    "hidden_size": st.integers(1, 2),
    "num_layers": st.integers(1, 2),
    "bias": FLAG,
    "batch_first": FLAG,
    "bidirectional": FLAG,
    "seed": SEED,
}
EMBEDDING_PADDING_IDX = Known(
    "per_sample",
    "ExpandedWeights' per-sample gradient of nn.Embedding ignores padding_idx: the padding row "
    "receives the gradient of every position that looks it up, while F.embedding's backward "
    "(the loop and vmap over grad agree) gives it zero, as padding_idx documents (torch 2.13.0 "
    "CPU; embedding_expanded_weights.py scatters grad_output into every looked-up row)",
    "e = nn.Embedding(4, 2, padding_idx=1).double(); idx = torch.tensor([[1, 2], [0, 1]]); "
    "(call_for_per_sample_grads(e)(idx) * torch.randn(2, 2, 2, dtype=torch.double)).sum()"
    ".backward(); e.weight.grad_sample[:, 1] is nonzero (e.g. [[0.19, 1.26], [0.52, -1.31]]) "
    "where torch.autograd.grad of each sample's loss gives [[0, 0], [0, 0]]; without "
    "padding_idx they agree exactly",
    message=r"per-sample grad of embedding\.weight",
    records=("407106383a9000bf",),
)
GROUP_NORM_NONCONTIGUOUS = Known(
    "per_sample",
    "ExpandedWeights' GroupNorm raises for a noncontiguous input (transposed or sliced; a "
    "storage offset alone is fine), where nn.GroupNorm itself accepts it (torch 2.13.0 CPU): "
    "group_norm_expanded_weights.py calls torch.native_group_norm on the input as given, while "
    "F.group_norm goes through aten::group_norm, which makes it contiguous. Not one of "
    "ExpandedWeights' 'unsupported' errors",
    "g = nn.GroupNorm(1, 3).double(); x = torch.randn(1, 6, dtype=torch.double)[:, ::2]; g(x) "
    "works; call_for_per_sample_grads(g)(x) -> RuntimeError: Expected "
    "X.is_contiguous(memory_format) to be true, but got false.",
    raises="RuntimeError",
    message=r"Expected X\.is_contiguous\(memory_format\) to be true",
    records=("5902597c72ac3c82",),
    fixed_in="2.14.1",
)
GROUP_NORM_CHANNELS_LAST_SEGFAULT = Known(
    "per_sample",
    "plain F.group_norm's backward dies by SIGSEGV on a 4-d input in channels_last order "
    "(torch 2.13.0 CPU, float32 and float64); the per-sample check's loop over samples runs it "
    "on each sample of such a batch. Matched on the inputs: the batch stored with a channel "
    "stride of 1 at rank 4 or more",
    "x = torch.randn(101).as_strided((1, 2, 2, 3), (12, 1, 6, 2)); w = torch.ones(2, "
    "requires_grad=True); torch.autograd.grad(F.group_norm(x, 2, w).sum(), w) -> Segmentation "
    "fault",
    params={"layouts.0.strides.1": 1, "layouts.0.strides.3": NOT_NONE},
    crash=True,
    records=("1a0640996f3cffc2",),
    fixed_in="2.14.1",
)
CONV_NONCONTIGUOUS_GRAD_OUTPUT = Known(
    "per_sample",
    "ExpandedWeights' convolution backward raises when the gradient reaching the conv output is "
    "not contiguous, where the plain conv backward accepts it (torch 2.13.0 CPU; of the layouts "
    "permuting the grad_output's dims, 4 of 6 raise for Conv1d, 18 of 24 for Conv2d, 90 of 120 "
    "for Conv3d)",
    "c = nn.Conv1d(1, 2, 1, bias=False).double(); x = torch.randn(2, 1, 2, dtype=torch.double); "
    "v = torch.randn(2, 2, 2, dtype=torch.double).mT.contiguous().mT; "
    "torch.autograd.grad(c(x), c.weight, v) works; call_for_per_sample_grads(c)(x).backward(v) "
    "-> RuntimeError: view size is not compatible with input tensor's size and stride (at least "
    "one dimension spans across two contiguous subspaces). Use .reshape(...) instead.; with "
    "v.contiguous() it works",
    raises="RuntimeError",
    message=r"view size is not compatible with input tensor's size and stride",
    params={"cotangent.layout": ("transposed", "expanded")},
    records=("7e93fc3717c573b9",),
)
INSTANCE_NORM_NONCONTIGUOUS_INPUT = Known(
    "per_sample",
    "ExpandedWeights' InstanceNorm2d/3d returns a silently wrong input gradient for a "
    "noncontiguous input (InstanceNorm1d is right), while its per-sample weight gradients and "
    "the plain module's input gradient are right (torch 2.13.0 CPU; over the layouts permuting "
    "the dims of a (2, 2, 1, 3) input the worst error is 7.2 (2d), 22 for (2, 2, 1, 1, 3) (3d))",
    "m = nn.InstanceNorm2d(2, affine=True).double(); x = torch.empty(6, dtype=torch.double)"
    ".as_strided((1, 2, 1, 3), (2, 1, 6, 2)).copy_(torch.randn(1, 2, 1, 3, dtype=torch.double))"
    ".requires_grad_(); g = torch.randn(1, 2, 1, 3, dtype=torch.double); "
    "(call_for_per_sample_grads(m)(x) * g).sum().backward(); x.grad differs from "
    "torch.autograd.grad((m(x) * g).sum(), x)[0] by up to 2.3 (7e-15 for a contiguous x)",
    message=r"grad of input x",
    params={"input_grad": True, "layouts.0": NOT_NONE},
    records=("1647b7f321cdafce",),
)
# The per_sample check reports this as "unsupported" (the error is ExpandedWeights'
# own); declared here, as documented, because float64 LSTMs happen to work.
LSTM_FLOAT32_NO_INPUT_GRAD = Known(
    "per_sample",
    "nn.LSTM under ExpandedWeights in float32 on CPU raises when the input does not require "
    "grad, the usual case for data (torch 2.13.0 CPU): the LSTM decomposition "
    "(torch/_decomp/decompositions.py, select_one_layer_lstm_function) takes the mkldnn "
    "inference path because only input.requires_grad is checked, not the weights. The same "
    "call works in float64, or with x.requires_grad_()",
    "m = nn.LSTM(3, 2, batch_first=True); out, _ = call_for_per_sample_grads(m)(torch.randn(4, "
    "5, 3)); out.sum().backward() -> RuntimeError: Expanded Weights encountered but cannot "
    "handle function mkldnn_rnn_layer.default (or '... function size')",
    raises="RuntimeError",
    message=r"Expanded Weights encountered but cannot handle function (mkldnn_rnn_layer|size)",
    dtypes=("float32",),
    expected="a documented limit: the docstring of call_for_per_sample_grads "
    "(torch.nn.utils._per_sample_grad, torch 2.13.0 to 2.15.0) says it does not work with any nn.RNN, "
    "nn.GRU or nn.LSTM included, and points to rewrites around nn.Linear (Opacus); that float64, or "
    "an input that requires grad, gets through ExpandedWeights' RNN decompositions is no promise",
)


# The torch module each target is, by name: what a failure of it names (Target.op)
MODULE_OPS = {
    "nn_linear": "torch.nn.Linear",
    "nn_conv1d": "torch.nn.Conv1d",
    "nn_conv2d": "torch.nn.Conv2d",
    "nn_conv3d": "torch.nn.Conv3d",
    "nn_embedding": "torch.nn.Embedding",
    "nn_embedding_padding_idx": "torch.nn.Embedding",
    "nn_layer_norm": "torch.nn.LayerNorm",
    "nn_group_norm": "torch.nn.GroupNorm",
    "nn_instance_norm1d": "torch.nn.InstanceNorm1d",
    "nn_instance_norm2d": "torch.nn.InstanceNorm2d",
    "nn_instance_norm3d": "torch.nn.InstanceNorm3d",
    "nn_rnn": "torch.nn.RNN",
    "nn_lstm": "torch.nn.LSTM",
    "nn_gru": "torch.nn.GRU",
    "nn_shared_linear": "torch.nn.Linear",
}


def module_target(name, fn, spec, *, kwargs, known=(), skip=COVERED, **options):
    return Target(
        name,
        fn,
        spec,
        FAMILY,
        kwargs=kwargs,
        skip=skip,
        known=known,
        module=BUILDERS[fn],
        op=MODULE_OPS.get(name),
        min_side=options.pop("min_side", 1),
        max_side=options.pop("max_side", 3),
        max_rank=options.pop("max_rank", 3),
        **options,
    )


register(
    module_target(
        "nn_linear", linear, "x: *e i", max_rank=3, kwargs={"out_features": SIZE, "bias": FLAG, "seed": SEED}
    ),
    module_target("nn_conv1d", conv, "x: c l", kwargs=CONV, known=(CONV_NONCONTIGUOUS_GRAD_OUTPUT,)),
    module_target("nn_conv2d", conv, "x: c h w", kwargs=CONV, known=(CONV_NONCONTIGUOUS_GRAD_OUTPUT,)),
    module_target("nn_conv3d", conv, "x: c d h w", max_side=2, kwargs=CONV, known=(CONV_NONCONTIGUOUS_GRAD_OUTPUT,)),
    module_target(
        "nn_embedding",
        embedding,
        "x: l, s: l",
        kinds={"x": Index("l")},
        kwargs={"extra_rows": st.integers(0, 2), "embedding_dim": SIZE, "seed": SEED},
    ),
    module_target(
        "nn_embedding_padding_idx",
        embedding,
        "x: l, s: l",
        kinds={"x": Index("l")},
        kwargs={
            "extra_rows": st.integers(0, 2),
            "embedding_dim": SIZE,
            "seed": SEED,
            "padding_idx": FromShapes(lambda s: st.integers(0, s["x"][0] - 1)),
        },
        known=(EMBEDDING_PADDING_IDX,),
    ),
    module_target(
        "nn_layer_norm",
        layer_norm,
        "x: *e n",
        distinct=True,
        kwargs={
            "normalized": FromShapes(_normalized),
            "elementwise_affine": FLAG,
            "bias": FLAG,
            "eps": EPS,
            "seed": SEED,
        },
        known=(NESTED_JVP_NORMS,),
    ),
    # three values per group at least (one or two: see _normalized)
    module_target(
        "nn_group_norm",
        group_norm,
        "x: c *s",
        distinct=True,
        kwargs={"num_groups": _kw.groups("x", 0, min_values=3), "affine": FLAG, "eps": EPS, "seed": SEED},
        known=(GROUP_NORM_NONCONTIGUOUS, GROUP_NORM_CHANNELS_LAST_SEGFAULT),
    ),
    # three spatial values at least (one or two: see _normalized), as size bounds rather
    # than a filter: a filter rejected most examples of several structures each
    module_target(
        "nn_instance_norm1d",
        instance_norm,
        "x: c l>=3",
        distinct=True,
        kwargs={"affine": FLAG, "eps": EPS, "seed": SEED},
        known=(NESTED_JVP_NORMS,),
    ),
    module_target(
        "nn_instance_norm2d",
        instance_norm,
        "x: c h>=2 w>=2",
        distinct=True,
        kwargs={"affine": FLAG, "eps": EPS, "seed": SEED},
        known=(INSTANCE_NORM_NONCONTIGUOUS_INPUT, NESTED_JVP_NORMS),
    ),
    module_target(
        "nn_instance_norm3d",
        instance_norm,
        "x: c d>=1 h>=2 w>=2",
        distinct=True,
        max_side=2,
        kwargs={"affine": FLAG, "eps": EPS, "seed": SEED},
        known=(INSTANCE_NORM_NONCONTIGUOUS_INPUT, NESTED_JVP_NORMS),
    ),
    module_target(
        "nn_rnn",
        recurrent,
        "x: t i",
        skip=SKIP,
        kwargs={"cell": "RNN", "nonlinearity": st.sampled_from(["tanh", "relu"]), **RECURRENT},
    ),
    module_target(
        "nn_lstm",
        recurrent,
        "x: t i",
        skip=SKIP,
        kwargs={"cell": "LSTM", **RECURRENT},
        known=(LSTM_FLOAT32_NO_INPUT_GRAD,),
    ),
    module_target("nn_gru", recurrent, "x: t i", skip=SKIP, kwargs={"cell": "GRU", **RECURRENT}),
    module_target(
        "nn_shared_linear", shared_linear, "x: *e i", max_rank=3, skip=NO_DTYPE, kwargs={"bias": FLAG, "seed": SEED}
    ),
    module_target(
        "nn_conv_block",
        conv_block,
        "x: c l",
        min_side=2,
        kwargs={"kernel_size": st.integers(1, 3), "num_groups": st.sampled_from([1, 2]), "seed": SEED},
    ),
)
