"""IEEE float32 on CUDA while a check runs.

cuDNN computes float32 convolutions and RNNs in TF32 by default (10 mantissa
bits), and users may enable it for cuBLAS matmuls too. Results then miss
float32 tolerances by design, not through a derivative bug: on an H100 an
nn.GRU's float32 input gradient was 2.4e-4 off relative to float64, and
exact to float32 tolerance with TF32 off. The checks judge derivatives, so
they run without it; the user's settings are restored afterwards.
"""

from __future__ import annotations

import contextlib
import functools
import inspect

import torch

__all__ = ["ieee_float32", "cuda_present"]


@functools.cache
def cuda_present() -> bool:
    return torch.cuda.is_available()


@functools.cache
def _cudnn_flag_names() -> tuple[str, ...]:
    return tuple(inspect.signature(torch.backends.cudnn.flags).parameters)


@contextlib.contextmanager
def ieee_float32():
    # cudnn.flags() rather than assignment: torch.testing's common_utils (the
    # OpInfo adapter imports it) forbids assigning cuDNN flags outside it.
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    current = {n: getattr(cudnn, n) for n in _cudnn_flag_names() if getattr(cudnn, n, None) is not None}
    saved = matmul.allow_tf32
    with cudnn.flags(**{**current, "allow_tf32": False}):
        matmul.allow_tf32 = False
        try:
            yield
        finally:
            matmul.allow_tf32 = saved
