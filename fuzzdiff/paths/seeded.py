"""Random targets: torch's generators, Python's ``random`` and numpy's global
generator seeded for a run.

A target that draws random numbers (``Target.random``: dropout, RReLU, a
module in training mode, a draw of Python's ``random`` or of ``numpy.random``)
is a deterministic function of its inputs once its generators are seeded alike
before every call, which is what a derivative identity needs. fuzzdiff is a
guest in its caller's process: the caller's generator states are restored
afterwards. numpy is seeded where it is imported (nothing else can have
drawn from it), so that the functions here stay torch-only: standalone
scripts copy them (the checkpoint check's).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["run_seeded", "reseeding", "seed_generators"]


def seed_generators(seed: int, devices: Sequence[int] = ()) -> None:
    """Seed the CPU's generator, those of the CUDA ``devices``, Python's
    ``random`` and, where numpy is imported, its global generator."""
    torch.random.default_generator.manual_seed(seed)
    for d in devices:
        torch.cuda.default_generators[d].manual_seed(seed)
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed % 2**32)


def run_seeded(seed: int, work: Callable[[], Any], devices: Sequence[int] = ()) -> Any:
    """``work()`` with every generator ``seed_generators`` knows seeded with
    ``seed``; the caller's states are restored."""
    state = random.getstate()
    numpy = sys.modules.get("numpy")
    numpy_state = numpy.random.get_state() if numpy is not None else None
    try:
        with torch.random.fork_rng(devices=list(devices)):
            seed_generators(seed, devices)
            return work()
    finally:
        random.setstate(state)
        if numpy is not None:
            numpy.random.set_state(numpy_state)


def reseeding(fn: Callable[..., Any], seed: int, devices: Sequence[int] = ()) -> Callable[..., Any]:
    """``fn`` with its generators seeded alike before every call (run it within
    ``run_seeded``, which restores the caller's states)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        seed_generators(seed, devices)
        return fn(*args, **kwargs)

    return call
