"""The known PyTorch discrepancies ModuleInfo targets hit, by module and mode.

Each is a precise signature (fuzzdiff.targets.known) shared with the
functional op's own targets, which hold its evidence: a module only reaches
the op's formula, so it fails the same way there.
"""

from __future__ import annotations

import fnmatch

from fuzzdiff.targets.catalog.norms import (
    BATCH_NORM_BACKWARD_SIZE1_CHANNELS_LAST,
    BATCH_NORM_DOUBLE_BACKWARD_LAYOUT,
    BATCH_NORM_STRIDED_WEIGHT,
    BATCH_NORM_STRIDED_WEIGHT_CHANNELS_LAST,
    GROUP_NORM_FORWARD,
    LOCAL_RESPONSE_NORM_5D_VIEW,
)
from fuzzdiff.targets.discrepancies import (
    BCE_WITH_LOGITS_NESTED_JVP,
    GROUP_NORM_COMPILED_AUTOGRAD_ORDER2,
    INDUCTOR_UNBATCHED_CONV2D_DYNAMIC,
    LAYER_NORM_COMPILED_AUTOGRAD_BIAS_ALIASED,
    MACHINERY,
    MSE_LOSS_CONSTANT_TARGET_ZEROTENSOR,
    NESTED_JVP_NORMS,
    NESTED_VMAP_LOSSES,
    NESTED_VMAP_LOSSES_CAPTURED_TARGET,
    REVERSE_OVER_FORWARD_INPLACE,
)
from fuzzdiff.targets.known import Known

__all__ = ["KNOWN", "known_for"]

# (module pattern, modes it is hit in, the discrepancy): "train", "eval" or both
KNOWN: tuple[tuple[str, tuple[str, ...], Known], ...] = (
    # batch statistics only in training mode; instance and layer statistics in both
    ("nn.BatchNorm*", ("train",), NESTED_JVP_NORMS),
    ("nn.InstanceNorm*", ("train", "eval"), NESTED_JVP_NORMS),
    ("nn.LayerNorm", ("train", "eval"), NESTED_JVP_NORMS),
    ("nn.BCEWithLogitsLoss", ("train", "eval"), BCE_WITH_LOGITS_NESTED_JVP),
    ("nn.GroupNorm", ("train", "eval"), GROUP_NORM_COMPILED_AUTOGRAD_ORDER2),
    ("nn.GroupNorm", ("train", "eval"), GROUP_NORM_FORWARD),
    ("nn.LayerNorm", ("train", "eval"), LAYER_NORM_COMPILED_AUTOGRAD_BIAS_ALIASED),
    ("nn.LocalResponseNorm", ("train", "eval"), LOCAL_RESPONSE_NORM_5D_VIEW),
    ("nn.Conv2d", ("train", "eval"), INDUCTOR_UNBATCHED_CONV2D_DYNAMIC),
    # eval mode runs the running statistics' kernel; the weight is the module's argument 1 too
    *(
        ("nn.BatchNorm*", ("eval",), known)
        for known in (
            BATCH_NORM_STRIDED_WEIGHT,
            BATCH_NORM_STRIDED_WEIGHT_CHANNELS_LAST,
            BATCH_NORM_DOUBLE_BACKWARD_LAYOUT,
            BATCH_NORM_BACKWARD_SIZE1_CHANNELS_LAST,
        )
    ),
    # nn.MSELoss's target is data: no tangent (forward over reverse), and unbatched where captured
    ("nn.MSELoss", ("train", "eval"), MSE_LOSS_CONSTANT_TARGET_ZEROTENSOR),
    *(
        (loss, ("train", "eval"), known)
        for loss in ("nn.MSELoss", "nn.SmoothL1Loss", "nn.HuberLoss")
        for known in (*NESTED_VMAP_LOSSES, *NESTED_VMAP_LOSSES_CAPTURED_TARGET)
    ),
    # the compiling machinery's, whatever the module (a loss's captured target or weight, a
    # norm's running statistics: a tensor the call holds meets a dual under aot_function)
    *(("nn.*", ("train", "eval"), known) for known in MACHINERY),
    # a softmax or log_softmax inside: attention (the math path of scaled_dot_product_attention) too
    *(
        (pattern, ("train", "eval"), REVERSE_OVER_FORWARD_INPLACE)
        for pattern in (
            "nn.Softmax*",
            "nn.LogSoftmax",
            "nn.Softmin",
            "nn.CrossEntropyLoss",
            "nn.AdaptiveLogSoftmaxWithLoss",
            "nn.MultiheadAttention",
            "nn.Transformer*",
        )
    ),
)


def known_for(module: str, training: bool) -> tuple[Known, ...]:
    """The known discrepancies of a ModuleInfo's targets in one mode."""
    mode = "train" if training else "eval"
    return tuple(k for pattern, modes, k in KNOWN if mode in modes and fnmatch.fnmatchcase(module, pattern))
