"""Torch discrepancies that targets of several families hit, declared once.

A catalog target and an OpInfo target of the same op reach the same torch bug;
each lists the one signature here among its ``known`` (fuzzdiff.known).
"""

from __future__ import annotations

from fuzzdiff.known import NOT_NONE, Known

__all__ = ["STRIDE0_GRAD_DYNAMIC", "NESTED_VMAP_LOSSES"]

STRIDE0_GRAD_DYNAMIC = Known(
    "compile",
    "compiled with dynamic=True (aot_eager or inductor), the gradient of a stride-0 leaf comes "
    "back as the mean of the cotangent in every entry (torch 2.13.0 CPU; eager, aot_function and "
    "dynamic=False give the cotangent; flatten, reshape and dsplit hit it, as may any op whose "
    "gradient reaches a stride-0 leaf)",
    "x = torch.tensor([.75, .75]).double().as_strided((2,), (0,)).requires_grad_(); v = "
    "torch.tensor([1.5, -0.5]).double(); torch.autograd.grad(torch.compile(lambda t: "
    "t.reshape(-1), backend='aot_eager', dynamic=True)(x), x, v) -> [0.5, 0.5], eager [1.5, -0.5]",
    features=("stride0",),
    params={"backend": ("aot_eager", "inductor")},
    message=r"^(aot_eager|inductor) vs eager: grad \d+ at",
    records=("e0ef41dd22bf95e4", "2ece44ba7e04481c"),
)

NESTED_VMAP_MESSAGE = (
    r"The size of tensor a \(\d+\) must match the size of tensor b \(\d+\)"
    r"|shape '\[\d+, \d+\]' is invalid for input of size \d+"
)


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
)
