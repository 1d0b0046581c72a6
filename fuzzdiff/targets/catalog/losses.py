"""Loss functions, with every reduction.

Regression losses differentiate both input and target (each has a gradient
formula). Class targets are ``Index`` arguments; probability targets are
``NoGrad`` arguments drawn inside [0, 1] through ``sample``. Losses with
``reduction="mean"`` over an empty batch are 0/0 (nan), so those use min_side=1.
"""

import torch.nn.functional as F
from hypothesis import strategies as st

from fuzzdiff.known import NOT_NONE, Known
from fuzzdiff.targets import Index, NoGrad, Target, register
from fuzzdiff.targets.catalog import _kw

FAMILY = "losses"
PAIR = "x: *b, y: *b"
PROBABILITY = (0.0, 1.0)
NESTED_VMAP_MESSAGE = (r"The size of tensor a \(\d+\) must match the size of tensor b \(\d+\)"
                       r"|shape '\[\d+, \d+\]' is invalid for input of size \d+")


def _nested_vmap_loss(unbatched: int, batched: int, **known) -> Known:
    """Nested vmap of a regression loss with argument ``unbatched`` not batched
    at the inner level (batched at the outer one or not at all) and
    ``batched`` batched there."""
    return Known("vmap", message=NESTED_VMAP_MESSAGE, raises="RuntimeError", params={
        "composition": "vmap_vmap", f"levels.1.in_dims.{unbatched}": None,
        f"levels.1.in_dims.{batched}": NOT_NONE}, **known)


NESTED_VMAP_LOSSES = (
    _nested_vmap_loss(
        1, 0,
        reason="nested vmap of F.mse_loss, F.smooth_l1_loss and F.huber_loss raises when the "
        "target is not batched at the inner level and the input is (torch 2.13.0 CPU; whether "
        "or not the target is batched at the outer level; F.l1_loss, one level, or both batched "
        "at both levels work)",
        evidence="x = torch.randn(2, 3, 4, dtype=torch.float64); y = torch.randn(2, 4, "
        "dtype=torch.float64); torch.func.vmap(torch.func.vmap(F.mse_loss, in_dims=(0, None)))"
        "(x, y) -> RuntimeError: The size of tensor a (12) must match the size of tensor b (4) "
        "at non-singleton dimension 1, where the loop torch.stack([torch.stack([F.mse_loss("
        "x[i, j], y[i]) for j in range(3)]) for i in range(2)]) works",
        records=("1673357661b54a8b", "88cf21f6d1983335", "872e38faf23f0852", "eeef7772eea56ec6")),
    _nested_vmap_loss(
        0, 1,
        reason="the same losses under nested vmap raise too the other way round: the *input* "
        "not batched at the inner level and the target batched there (torch 2.13.0 CPU; "
        "F.l1_loss works)",
        evidence="x = torch.randn(1, dtype=torch.float64); y = torch.randn(1, 2, "
        "dtype=torch.float64); torch.func.vmap(torch.func.vmap(F.mse_loss, in_dims=(None, 0)))"
        "(x, y) -> RuntimeError: shape '[1, 1]' is invalid for input of size 2 (with trailing "
        "dims of size 2: The size of tensor a (2) must match the size of tensor b (4)); the loop "
        "over both batches works",
        records=("3e90340a8de4bb31",)),
)


def cross_entropy(x, t, reduction, label_smoothing):
    return F.cross_entropy(x, t, reduction=reduction, label_smoothing=label_smoothing)


def cross_entropy_weighted(x, t, w, reduction):
    return F.cross_entropy(x, t, w, reduction=reduction)


def cross_entropy_probs(x, p, reduction, label_smoothing):
    return F.cross_entropy(x, p, reduction=reduction, label_smoothing=label_smoothing)


register(
    Target("mse_loss", F.mse_loss, PAIR, FAMILY, min_side=1, kwargs={"reduction": _kw.reductions},
           known=NESTED_VMAP_LOSSES),
    # |x - y| has a kink where x == y; aliasing the two (x is y) is the symmetric
    # case where central differences and torch's subgradient sign(0) = 0 agree
    Target("l1_loss", F.l1_loss, PAIR, FAMILY, min_side=1, kwargs={"reduction": _kw.reductions}),
    Target("smooth_l1_loss", F.smooth_l1_loss, PAIR, FAMILY, min_side=1,
           kwargs={"reduction": _kw.reductions, "beta": st.sampled_from([1.0, 0.3])},
           known=NESTED_VMAP_LOSSES),
    Target("huber_loss", F.huber_loss, PAIR, FAMILY, min_side=1,
           kwargs={"reduction": _kw.reductions, "delta": st.sampled_from([1.0, 0.3])},
           known=NESTED_VMAP_LOSSES),
    Target("soft_margin_loss", F.soft_margin_loss, "x: *b, y: *b", FAMILY, min_side=1,
           kinds={"y": NoGrad()}, kwargs={"reduction": _kw.reductions}),
    Target("cross_entropy", cross_entropy, "x: n c, t: n", FAMILY, min_side=1,
           kinds={"t": Index("c")},
           kwargs={"reduction": _kw.reductions, "label_smoothing": st.sampled_from([0.0, 0.2])}),
    # class weights name c outside a variadic group, so Index("c") finds its size
    Target("cross_entropy_nd", cross_entropy_weighted, "x: n c *s, t: n *s, w: c", FAMILY,
           min_side=1, max_side=3, kinds={"t": Index("c"), "w": NoGrad()},
           sample={"w": (0.5, 2.0)}, kwargs={"reduction": _kw.reductions}),
    Target("cross_entropy_probs", cross_entropy_probs, "x: n c, p: n c", FAMILY, min_side=1,
           kinds={"p": NoGrad()}, sample={"p": PROBABILITY},
           kwargs={"reduction": _kw.reductions, "label_smoothing": st.sampled_from([0.0, 0.2])}),
    Target("nll_loss", F.nll_loss, "x: n c, t: n", FAMILY, min_side=1, kinds={"t": Index("c")},
           kwargs={"reduction": _kw.reductions}),
    Target("binary_cross_entropy", F.binary_cross_entropy, "x: *b, y: *b", FAMILY, min_side=1,
           domain={"x": (0.0, 1.0)}, kinds={"y": NoGrad()}, sample={"y": PROBABILITY},
           kwargs={"reduction": _kw.reductions}),
    Target("binary_cross_entropy_with_logits", F.binary_cross_entropy_with_logits,
           "x: *b, y: *b", FAMILY, min_side=1, kinds={"y": NoGrad()}, sample={"y": PROBABILITY},
           kwargs={"reduction": _kw.reductions}),
    # kl_div(input = log q, target = p): the target is differentiable, and p > 0
    # keeps its log smooth (log_target=True reads it as log p: any p > 0 is fine too)
    Target("kl_div", F.kl_div, "x: *b, y: *b", FAMILY, min_side=1, domain={"y": (0.0, None)},
           kwargs={"reduction": st.sampled_from(["mean", "sum", "none", "batchmean"]),
                   "log_target": st.booleans()}),
    Target("poisson_nll_loss", F.poisson_nll_loss, "x: *b, y: *b", FAMILY, min_side=1,
           kinds={"y": NoGrad()}, sample={"y": (0.0, 3.0)},
           kwargs={"log_input": st.just(True), "reduction": _kw.reductions}),
    # var is clamped below by eps=1e-6: keep it well above
    Target("gaussian_nll_loss", F.gaussian_nll_loss, "x: *b, y: *b, var: *b", FAMILY, min_side=1,
           domain={"var": (0.0, None)}, kwargs={"reduction": _kw.reductions}),
)
