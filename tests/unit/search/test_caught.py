"""What the code did quietly while a check failed is evidence of whose bug it
is (fuzzdiff.search.caught): a library that catches vmap's refusal of its
data-dependent ``if`` and falls back to another computation, with a warning,
was blamed on PyTorch's vmap, and its own warning printed above the verdict."""

import warnings

import torch

import fuzzdiff
from fuzzdiff.search.blame import PYTORCH, USER
from fuzzdiff.search.caught import quietly


def solve_spd(A, b):
    """A library's solve: Cholesky where it works, else a jittered eigendecomposition."""
    try:
        L, info = torch.linalg.cholesky_ex(A)
        if info.any():
            raise RuntimeError("not positive definite")
        return torch.cholesky_solve(b.unsqueeze(-1), L).squeeze(-1)
    except RuntimeError:
        warnings.warn("cholesky failed; falling back to a jittered eigendecomposition", stacklevel=2)
        w, V = torch.linalg.eigh(A)
        return (V @ ((V.mT @ b.unsqueeze(-1)).squeeze(-1) / (w + 0.1)).unsqueeze(-1)).squeeze(-1)


def spd_solve(M, b):
    return solve_spd(M @ M.mT + torch.eye(M.shape[-1], dtype=M.dtype), b)


def test_a_caught_torch_error_and_a_warning_are_seen():
    A = torch.eye(3, dtype=torch.float64).expand(2, 3, 3)
    b = torch.ones(2, 3, dtype=torch.float64)
    quiet = quietly(lambda: torch.func.vmap(solve_spd)(A, b))
    (caught,) = quiet.caught
    assert "RuntimeError: vmap: It looks like you're attempting to use a Tensor in some data-dependent" in caught
    assert "caught in solve_spd" in caught
    assert quiet.warned == ("UserWarning: cholesky failed; falling back to a jittered eigendecomposition",)
    assert quietly(lambda: solve_spd(A[0], b[0])) == type(quiet)()  # in eager nothing is caught or said


def test_a_library_that_swallows_vmaps_refusal_is_blamed_not_vmap():
    report = fuzzdiff.check(spd_solve, "M: n n, b: n", checks=["vmap"], dtypes=[torch.float64],
                            max_examples=20, seed=0, progress=False, sizes=(1, 3))
    assert [f.check for f in report.failures] == ["vmap"], report.summary()
    whose = report.failures[0].blame
    assert whose.whose == USER and whose.whose != PYTORCH
    assert "catches torch's error itself" in whose.evidence and "caught in solve_spd" in whose.evidence
    assert "your code warned: UserWarning: cholesky failed" in whose.evidence
