"""Softmax and friends along a dim valid for the drawn rank."""

import torch
import torch.nn.functional as F

from fuzzdiff.targets import Target, register
from fuzzdiff.targets.catalog import _kw
from fuzzdiff.targets.discrepancies import REVERSE_OVER_FORWARD_INPLACE

FAMILY = "softmax"
# Scaled values saturate the softmax, shifted ones test the max subtracted first,
# equal ones tie every value with the max.
LARGE = ("large", "offset", "all_equal")

register(
    Target(
        "softmax",
        torch.softmax,
        "x: ...",
        FAMILY,
        structured=LARGE,
        kwargs={"dim": _kw.dim()},
        known=(REVERSE_OVER_FORWARD_INPLACE,),
    ),
    Target(
        "log_softmax",
        torch.log_softmax,
        "x: ...",
        FAMILY,
        structured=LARGE,
        kwargs={"dim": _kw.dim()},
        known=(REVERSE_OVER_FORWARD_INPLACE,),
    ),
    Target(
        "softmin",
        F.softmin,
        "x: ...",
        FAMILY,
        structured=LARGE,
        kwargs={"dim": _kw.dim()},
        known=(REVERSE_OVER_FORWARD_INPLACE,),
    ),
)
