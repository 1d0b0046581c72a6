"""Random targets: torch's generators and Python's ``random`` seeded for a run.

A target that draws random numbers (``Target.random``: dropout, RReLU, a
module in training mode) is a deterministic function of its inputs once its
generators are seeded alike before every call, which is what a derivative
identity needs. fuzzdiff is a guest in its caller's process: the caller's
generator states are restored afterwards.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["run_seeded", "reseeding", "seed_generators"]


def seed_generators(seed: int, devices: Sequence[int] = ()) -> None:
    """Seed the CPU's generator, those of the CUDA ``devices``, and Python's ``random``."""
    torch.random.default_generator.manual_seed(seed)
    for d in devices:
        torch.cuda.default_generators[d].manual_seed(seed)
    random.seed(seed)


def run_seeded(seed: int, work: Callable[[], Any], devices: Sequence[int] = ()) -> Any:
    """``work()`` with torch's generators (the CPU's and ``devices``') and
    Python's ``random`` seeded with ``seed``; the caller's states are restored."""
    state = random.getstate()
    try:
        with torch.random.fork_rng(devices=list(devices)):
            seed_generators(seed, devices)
            return work()
    finally:
        random.setstate(state)


def reseeding(fn: Callable[..., Any], seed: int, devices: Sequence[int] = ()) -> Callable[..., Any]:
    """``fn`` with its generators seeded alike before every call (run it within
    ``seeded``, which restores the caller's states)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        seed_generators(seed, devices)
        return fn(*args, **kwargs)

    return call
