"""Where an op or a rule is not put on trial alone, and which failure alone can be the call's.

Localization (fuzzdiff.search.localize) accuses an op that fails alone at the
inputs the call gave it. Some points are no fair trial: an input that holds
nan or inf (finite differences there are noise, and a nan out of a nan in is
no op's fault), and a spectral op at repeated eigen- or singular values, where
torch documents its derivative as undefined (a rank-deficient product fed to
eigh is the call's doing). And an op's nan alone cannot be the cause of a call
whose derivative is finite: a nan runs on into everything after it.
"""

from __future__ import annotations

import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fuzzdiff.case.case import Case
from fuzzdiff.verdict import Verdict

__all__ = ["explains", "repeated_spectrum", "spectrum_met", "unjudged_at"]


# Spectral ops whose derivatives torch documents as undefined at repeated
# eigenvalues or singular values ("gradients ... will only be finite when A has
# distinct eigenvalues"): there an op alone fails by its definition, and what
# fed it a degenerate matrix (a rank-deficient product) is the call's doing.
_SPECTRAL = {
    "aten::_linalg_eigh": "eigvalsh",
    "aten::linalg_eigh": "eigvalsh",
    "aten::linalg_eig": "eigvals",
    "aten::_linalg_svd": "svdvals",
    "aten::linalg_svd": "svdvals",
    "aten::svd": "svdvals",
}
_REPEATED = 1e-6  # relative gap under which two eigen- or singular values count as repeated
REPEATED_SPECTRUM = "at repeated eigen- or singular values, where torch documents its derivative as undefined"


def repeated_spectrum(name: str, matrix: torch.Tensor) -> bool:
    """Whether spectral op ``name`` meets ``matrix`` at repeated eigen- or singular values."""
    spectrum = _SPECTRAL.get(name)
    if spectrum is None or matrix.dim() < 2 or min(matrix.shape[-2:]) < 2:
        return False
    values = getattr(torch.linalg, spectrum)(
        matrix.detach().to(torch.complex128 if matrix.is_complex() else torch.float64)
    )
    values = values.abs() if values.is_complex() else values
    ordered = values.sort(dim=-1).values
    gaps = (ordered[..., 1:] - ordered[..., :-1]).abs()
    scale = ordered.abs().amax(dim=-1, keepdim=True).clamp_min(1.0)
    return bool((gaps <= _REPEATED * scale).any())


class _Spectra(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.met: str | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        if self.met is None and name in _SPECTRAL and args and isinstance(args[0], torch.Tensor):
            if repeated_spectrum(name, args[0]):
                self.met = name
        return func(*args, **(kwargs or {}))


def spectrum_met(call) -> str | None:
    """The spectral op that ``call()`` runs at repeated eigen- or singular
    values (None: none does, or the call raised first)."""
    watch = _Spectra()
    try:
        with watch:
            call()
    except Exception:  # noqa: BLE001 - what ran before the raise still counts
        pass
    return watch.met


def unjudged_at(name: str, at: Case) -> str | None:
    """Why an op is not judged alone at ``at``: an input that holds nan or inf
    (an op is judged at finite points: there finite differences are noise,
    and a nan out of a nan in is no op's fault), or a spectral op at repeated
    eigen- or singular values, where torch documents its derivative as
    undefined. None for any other op or point."""
    tensors = [a for a in at.materialize(requires_grad=False).args if isinstance(a, torch.Tensor)]
    if any(t.is_floating_point() or t.is_complex() for t in tensors) and not all(
        bool(t.isfinite().all()) for t in tensors if t.is_floating_point() or t.is_complex()
    ):
        return "an input holds nan or inf"
    matrix = next(iter(tensors), None)
    if matrix is not None and repeated_spectrum(name, matrix):
        return REPEATED_SPECTRUM
    return None


def explains(alone: Verdict, failed: Verdict) -> bool:
    """Whether an op's failure alone can be the call's: a nan or inf derivative
    alone runs on into the call's, so where the call's is finite, another bug
    there (eigh's nan at a 1 x 1 matrix beside a clamp's wrong value) is not it."""
    ours, theirs = alone.errors.get("analytic"), failed.errors.get("analytic")
    if not isinstance(ours, float) or not isinstance(theirs, float):
        return True
    return math.isfinite(ours) or not math.isfinite(theirs)
