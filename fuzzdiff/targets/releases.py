"""Torch releases: which one is running, and whether a bug's fix is in it.

Corpus records and known discrepancies name the release that fixed them
(``fixed_in``), so a fix is tied to the torch that has it, and a fixed bug
that comes back is news rather than a known discrepancy.
"""

from __future__ import annotations

import re

import torch
from torch.torch_version import TorchVersion

__all__ = ["RELEASE", "release", "fixed_by"]

RELEASE = re.compile(r"\d+\.\d+(\.\d+)?")  # what a fixed_in names: "2.14.1"


def release(version: str | None = None) -> str:
    """A torch version without its local part: "2.13.0+cpu" -> "2.13.0"."""
    return str(torch.__version__ if version is None else version).split("+")[0]


def fixed_by(fixed_in: str, version: str | None = None) -> bool:
    """Whether torch ``version`` (default: the running one) is ``fixed_in`` or later."""
    return TorchVersion(release(version)) >= fixed_in
