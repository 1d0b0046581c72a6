"""Loss functions, with every reduction.

Regression losses differentiate both input and target (each has a gradient
formula). Class targets are ``Index`` arguments; probability targets are
``NoGrad`` arguments drawn inside [0, 1] through ``sample``. Losses with
``reduction="mean"`` over an empty batch are 0/0 (nan), so those use min_side=1.
"""

import torch.nn.functional as F
from hypothesis import strategies as st

from fuzzdiff.targets import Index, NoGrad, Target, register
from fuzzdiff.targets.catalog import _kw
from fuzzdiff.targets.discrepancies import (
    BCE_WITH_LOGITS_NESTED_JVP,
    MSE_LOSS_CONSTANT_TARGET_ZEROTENSOR,
    NESTED_VMAP_LOSSES,
    REVERSE_OVER_FORWARD_INPLACE,
)

FAMILY = "losses"
PAIR = "x: *b, y: *b"
PROBABILITY = (0.0, 1.0)


def cross_entropy(x, t, reduction, label_smoothing):
    return F.cross_entropy(x, t, reduction=reduction, label_smoothing=label_smoothing)


def cross_entropy_weighted(x, t, w, reduction):
    return F.cross_entropy(x, t, w, reduction=reduction)


def cross_entropy_probs(x, p, reduction, label_smoothing):
    return F.cross_entropy(x, p, reduction=reduction, label_smoothing=label_smoothing)


register(
    Target(
        "mse_loss", F.mse_loss, PAIR, FAMILY, min_side=1, kwargs={"reduction": _kw.reductions}, known=NESTED_VMAP_LOSSES
    ),
    # a target that is data, not a parameter (nn.MSELoss's labels): it carries no tangent
    Target(
        "mse_loss_constant_target",
        F.mse_loss,
        PAIR,
        FAMILY,
        min_side=1,
        kinds={"y": NoGrad()},
        kwargs={"reduction": _kw.reductions},
        known=(MSE_LOSS_CONSTANT_TARGET_ZEROTENSOR,),
    ),
    # |x - y| has a kink where x == y; aliasing the two (x is y) is the symmetric
    # case where central differences and torch's subgradient sign(0) = 0 agree
    Target("l1_loss", F.l1_loss, PAIR, FAMILY, min_side=1, kwargs={"reduction": _kw.reductions}),
    Target(
        "smooth_l1_loss",
        F.smooth_l1_loss,
        PAIR,
        FAMILY,
        min_side=1,
        kwargs={"reduction": _kw.reductions, "beta": st.sampled_from([1.0, 0.3])},
        known=NESTED_VMAP_LOSSES,
    ),
    Target(
        "huber_loss",
        F.huber_loss,
        PAIR,
        FAMILY,
        min_side=1,
        kwargs={"reduction": _kw.reductions, "delta": st.sampled_from([1.0, 0.3])},
        known=NESTED_VMAP_LOSSES,
    ),
    Target(
        "soft_margin_loss",
        F.soft_margin_loss,
        "x: *b, y: *b",
        FAMILY,
        min_side=1,
        kinds={"y": NoGrad()},
        kwargs={"reduction": _kw.reductions},
    ),
    Target(
        "cross_entropy",
        cross_entropy,
        "x: n c, t: n",
        FAMILY,
        min_side=1,
        kinds={"t": Index("c")},
        kwargs={"reduction": _kw.reductions, "label_smoothing": st.sampled_from([0.0, 0.2])},
        known=(REVERSE_OVER_FORWARD_INPLACE,),
    ),
    # class weights name c outside a variadic group, so Index("c") finds its size
    Target(
        "cross_entropy_nd",
        cross_entropy_weighted,
        "x: n c *s, t: n *s, w: c",
        FAMILY,
        min_side=1,
        max_side=3,
        kinds={"t": Index("c"), "w": NoGrad()},
        sample={"w": (0.5, 2.0)},
        kwargs={"reduction": _kw.reductions},
        known=(REVERSE_OVER_FORWARD_INPLACE,),
    ),
    Target(
        "cross_entropy_probs",
        cross_entropy_probs,
        "x: n c, p: n c",
        FAMILY,
        min_side=1,
        kinds={"p": NoGrad()},
        sample={"p": PROBABILITY},
        kwargs={"reduction": _kw.reductions, "label_smoothing": st.sampled_from([0.0, 0.2])},
        known=(REVERSE_OVER_FORWARD_INPLACE,),
    ),
    Target(
        "nll_loss",
        F.nll_loss,
        "x: n c, t: n",
        FAMILY,
        min_side=1,
        kinds={"t": Index("c")},
        kwargs={"reduction": _kw.reductions},
    ),
    Target(
        "binary_cross_entropy",
        F.binary_cross_entropy,
        "x: *b, y: *b",
        FAMILY,
        min_side=1,
        domain={"x": (0.0, 1.0)},
        kinds={"y": NoGrad()},
        sample={"y": PROBABILITY},
        kwargs={"reduction": _kw.reductions},
    ),
    Target(
        "binary_cross_entropy_with_logits",
        F.binary_cross_entropy_with_logits,
        "x: *b, y: *b",
        FAMILY,
        min_side=1,
        kinds={"y": NoGrad()},
        sample={"y": PROBABILITY},
        kwargs={"reduction": _kw.reductions},
        known=(BCE_WITH_LOGITS_NESTED_JVP,),
    ),
    # kl_div(input = log q, target = p): the target is differentiable, and p > 0
    # keeps its log smooth (log_target=True reads it as log p: any p > 0 is fine too)
    Target(
        "kl_div",
        F.kl_div,
        "x: *b, y: *b",
        FAMILY,
        min_side=1,
        domain={"y": (0.0, None)},
        kwargs={"reduction": st.sampled_from(["mean", "sum", "none", "batchmean"]), "log_target": st.booleans()},
    ),
    Target(
        "poisson_nll_loss",
        F.poisson_nll_loss,
        "x: *b, y: *b",
        FAMILY,
        min_side=1,
        kinds={"y": NoGrad()},
        sample={"y": (0.0, 3.0)},
        kwargs={"log_input": st.just(True), "reduction": _kw.reductions},
    ),
    # var is clamped below by eps=1e-6: keep it well above
    Target(
        "gaussian_nll_loss",
        F.gaussian_nll_loss,
        "x: *b, y: *b, var: *b",
        FAMILY,
        min_side=1,
        domain={"var": (0.0, None)},
        kwargs={"reduction": _kw.reductions},
    ),
)
