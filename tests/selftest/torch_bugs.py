"""Plain-torch stand-ins for PyTorch bugs that newcomers' trials met in third-party code.

Each is the smallest function that shows one bug, written as the library wrote it, so
that its corpus record replays without the library: fuzzdiff checks it as user code.
"""

from __future__ import annotations

import numpy as np
import torch


class _Recorded(torch.nn.Module):
    """pytorch_metric_learning's losses set an attribute before nn.Module.__init__
    (eager allows a plain value there)."""

    def __init__(self):
        super().__init__()


class HalfInitialized(_Recorded):
    def __init__(self):
        self.flag = True  # before Module.__init__, after which Dynamo's trace resumes
        torch._dynamo.graph_break()
        super().__init__()

    def forward(self, x):
        return x * 2


def built_inside(x):
    """The module built inside the function, as a loss is per call: torch.compile crashes
    inside Dynamo (InternalTorchDynamoError: no attribute '_parameters')."""
    return HalfInitialized()(x)


class LayerSizes:
    """tensorly-torch keeps a layer's size as np.prod(...), a numpy integer: a strict
    export makes it a fake constant, and the exported program cannot run
    ("SymIntArrayRef expected to contain only concrete integers")."""

    n = np.prod((2, 2))


def numpy_sized(x):
    return torch.reshape(x, (-1, LayerSizes.n)).sin()
