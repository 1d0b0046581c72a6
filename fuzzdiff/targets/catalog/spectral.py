"""torch.fft along the last dims, with batch dims drawn in front.

OpInfo samples the FFTs at fixed shapes; drawn batch dims reach what those
shapes do not, an empty batch among them. A complex result is returned as
its real view, so that every check compares real tensors.
"""

import torch
from hypothesis import strategies as st

from fuzzdiff.targets import Target, register
from fuzzdiff.targets.discrepancies import EAGER_CHECKS
from fuzzdiff.targets.known import Known

FAMILY = "spectral"
NORM = {"norm": st.sampled_from([None, "forward", "backward", "ortho"])}

FFT_EMPTY_BATCH_MKL = Known(
    (*EAGER_CHECKS, "vmap", "compile", "compiled_autograd", "export"),
    "torch.fft on CPU (its MKL kernels) raises for an input with an empty batch dim and a valid "
    "signal length, where it should return an empty result: the collapsed batch of 0 transforms is "
    "handed to MKL's DFTI, which refuses it (torch 2.13.0 CPU; reported upstream as "
    "pytorch/pytorch#174984, mended by pytorch/pytorch#187661: torch 2.15.0 returns the empty "
    "result, and its backward then raises 'Tensor must have a last dimension with stride 1', "
    "upstream: none found)",
    "torch.fft.rfft(torch.zeros(0, 2, 16, dtype=torch.float64)) -> RuntimeError: MKL FFT error: "
    "Intel oneMKL DFTI ERROR: Inconsistent configuration parameters; torch.zeros(1, 2, 16) gives "
    "a (1, 2, 9) result",
    raises="RuntimeError",
    message=r"MKL FFT error: .*Inconsistent configuration parameters",
    features=("empty",),
    records=("615c5450e6250978",),
    fixed_in="2.15.0",
)


def rfft(x, norm):
    return torch.view_as_real(torch.fft.rfft(x, norm=norm))


def irfft(re, im, norm):
    return torch.fft.irfft(torch.complex(re, im), norm=norm)


def fft2(x, norm):
    return torch.view_as_real(torch.fft.fft2(x, norm=norm))


register(
    Target("rfft", rfft, "x: *b n>=1", FAMILY, kwargs=NORM, known=(FFT_EMPTY_BATCH_MKL,)),
    # an irfft of n bins has 2 (n - 1) points: one bin has none
    Target("irfft", irfft, "re: *b n>=2, im: *b n>=2", FAMILY, kwargs=NORM, known=(FFT_EMPTY_BATCH_MKL,)),
    Target("fft2", fft2, "x: *b m>=1 n>=1", FAMILY, kwargs=NORM, known=(FFT_EMPTY_BATCH_MKL,)),
)
