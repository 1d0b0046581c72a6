"""torch.library custom ops: what a user's op looks like, with torch's own pieces.

``sin`` is a custom op with a kernel, a fake kernel and a backward registered by
``register_autograd``, all correct. It exercises the ``opcheck`` check at every
fuzzed structure. It has no forward-mode rule, and torch gives such an op zero
tangents silently: the forward check reports that as unsupported, with a warning.
"""

import torch

from fuzzdiff.targets import Target, register

FAMILY = "custom_ops"


@torch.library.custom_op("fuzzdiff_catalog::sin", mutates_args=())
def sin(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x)


@sin.register_fake
def _(x):
    return torch.empty_like(x)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad * torch.cos(x)


sin.register_autograd(_backward, setup_context=_setup)

register(
    Target("custom_sin", sin, "x: ...", FAMILY),
)
