"""Which of torch's random ops a call draws from, a private generator's included.

A function that seeds a generator of its own (a library's ``seed=`` for its
random projections) gives the same output twice, so calling it twice does not
show that it draws; but a float32 and a float64 call, two layouts or a batch and
its samples draw other numbers from that seed. torch tags its random ops
``nondeterministic_seeded``; watching the dispatcher for them sees every draw.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["RandomOps", "random_ops"]


class RandomOps(TorchDispatchMode):
    """The names of torch's random ops called under it."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if torch.Tag.nondeterministic_seeded in func.tags:
            self.ops.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def random_ops(call: Callable[[], Any]) -> set[str]:
    """The random ops ``call`` draws from (what it raises is not asked: nothing then)."""
    watch = RandomOps()
    try:
        with watch:
            call()
    except Exception:  # noqa: BLE001 - the caller's function: a raise tells nothing of its draws
        pass
    return watch.ops
