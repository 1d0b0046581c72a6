"""Layers that draw random numbers while training: dropout and RReLU.

They are ``random=True`` targets: every check calls them with torch's
generators seeded alike before each call (fuzzdiff.search.runner), so each is a
deterministic function of its input there; the checkpoint check seeds them
once per side instead, so that its recomputation must draw what
``preserve_rng_state`` restores.
"""

import torch.nn.functional as F
from hypothesis import strategies as st

from fuzzdiff.targets import Target, register
from fuzzdiff.targets.known import Known
from fuzzdiff.targets.randomness import SEEDED_SKIPS

FAMILY = "random"

SKIP = {
    "dtype": "float32 and float64 draw other random numbers from one seed (uniform and bernoulli "
    "round their draws to the dtype), so the two runs are different functions",
    "device": SEEDED_SKIPS["device"],
}

RRELU_EARLY_STOP = Known(
    "checkpoint",
    "torch.utils.checkpoint(use_reentrant=False), with its default early stop, gives F.rrelu "
    "(training mode) a gradient read from memory nobody wrote when rrelu is the last op of the "
    "checkpointed function that saves a tensor: autograd saves rrelu's noise buffer before the "
    "kernel fills it, and the recomputation stops right after that save (torch 2.13.0 CPU; "
    "set_checkpoint_early_stop(False), use_reentrant=True, or an op after rrelu that saves a "
    "tensor all give the right gradient; nn.RReLU in training mode too)",
    "x = torch.linspace(-2, 1, 6, dtype=torch.float64).requires_grad_(); torch.manual_seed(0); "
    "g, = torch.autograd.grad(F.rrelu(x, training=True), x, torch.ones(6, dtype=torch.float64)); "
    "torch.manual_seed(0); y = checkpoint(lambda t: F.rrelu(t, training=True), x, "
    "use_reentrant=False); g_ck, = torch.autograd.grad(y, x, torch.ones(6, dtype=torch.float64)) "
    "-> y equals the plain output, g is [0.327, 0.272, 0.221, 0.317, 1, 1], g_ck is [0.0, "
    "7.16e-322, 4.64e-310, 6.93e-310, 0.0, 0.0] (uninitialized memory)",
    message=r"checkpoint\(use_reentrant=False\) vs plain: grad",
    params={"reentrant": False},
    records=("828fdf54f37072d6",),
)


def dropout_training(x, p):
    return F.dropout(x, p, training=True)


def rrelu_training(x):
    return F.rrelu(x, training=True)


register(
    Target(
        "dropout_training",
        dropout_training,
        "x: ...",
        FAMILY,
        kwargs={"p": st.sampled_from([0.25, 0.5])},
        skip={
            **SKIP,
            "layout": "dropout draws its mask in the input's memory layout (bernoulli_ on "
            "empty_like(x)): from one seed, two layouts of the same values drop different elements",
        },
        random=True,
    ),
    Target(
        "rrelu_training",
        rrelu_training,
        "x: ...",
        FAMILY,
        kinks=(0.0,),
        skip=SKIP,
        random=True,
        known=(RRELU_EARLY_STOP,),
    ),
)
