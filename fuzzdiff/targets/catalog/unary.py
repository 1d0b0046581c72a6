"""Unary elementwise ops, each with the domain where it is smooth."""

import torch

from fuzzdiff.targets import Target, register

FAMILY = "unary"

register(
    Target("exp", torch.exp, "x: ...", FAMILY, specials=True),
    Target("log", torch.log, "x: ...", FAMILY, domain={"x": (0.0, None)}),
    Target("sqrt", torch.sqrt, "x: ...", FAMILY, domain={"x": (0.0, None)}),
    Target("abs", torch.abs, "x: ...", FAMILY, kinks=(0.0,)),
)
