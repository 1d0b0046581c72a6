"""Linear algebra on matrices made well-conditioned inside ``fn``.

Every entry of ``a`` is drawn in (-1, 1) and ``fn`` maps it to a matrix whose
conditioning (and, where derivatives need it, spectral gap) is bounded for any
such ``a``, by a differentiable transform, so the derivative is judged where
it is well defined:

- ``a + n I`` is strictly diagonally dominant: invertible, with a positive
  determinant (every Gershgorin disc lies in Re z > 0);
- ``a a^T + n I`` is symmetric positive definite (Cholesky);
- ``D + a`` with ``D = diag(d_1 < d_2 < ...)`` spaced by ``2 max(m, n) + 1``:
  by Weyl's inequality (``||a||_2 <= max(m, n)``) its singular values, or
  eigenvalues for ``sym(a)``, stay distinct and away from 0.
"""

import torch
from hypothesis import strategies as st

from fuzzdiff.targets import Target, register
from fuzzdiff.targets.discrepancies import DET_GRAD_TRANSPOSED_STRIDE0, EAGER_CHECKS, NESTED_JVP_LINALG
from fuzzdiff.targets.known import Known

FAMILY = "linalg"
UNIT = {"a": (-1.0, 1.0)}
SQUARE = "a: *b n n"


def dominant(a):
    n = a.shape[-1]
    return a + n * torch.eye(n, dtype=a.dtype, device=a.device)


def spd(a):
    n = a.shape[-1]
    return a @ a.mT + n * torch.eye(n, dtype=a.dtype, device=a.device)


def spread(a):
    """``a`` plus a diagonal with well separated, positive entries (any m x n)."""
    m, n = a.shape[-2:]
    d = (2 * max(m, n) + 1) * torch.arange(1, n + 1, dtype=a.dtype, device=a.device)
    return a + torch.eye(m, n, dtype=a.dtype, device=a.device) * d


def symmetric_spread(a):
    return spread((a + a.mT) / 2)


def solve(a, r):
    return torch.linalg.solve(dominant(a), r)


def solve_triangular(a, r, upper):
    t = torch.triu(a) if upper else torch.tril(a)
    return torch.linalg.solve_triangular(dominant(t), r, upper=upper)


def inv(a):
    return torch.linalg.inv(dominant(a))


def det(a):
    return torch.linalg.det(dominant(a))


def slogdet(a):
    return torch.linalg.slogdet(dominant(a))


def logdet(a):
    return torch.logdet(dominant(a))


def cholesky(a):
    return torch.linalg.cholesky(spd(a))


def qr(a):
    return torch.linalg.qr(dominant(a))


def svdvals(a):
    return torch.linalg.svdvals(spread(a))


def pinv(a):
    return torch.linalg.pinv(spread(a))


def eigvalsh(a):
    return torch.linalg.eigvalsh(symmetric_spread(a))


def matrix_exp(a):
    return torch.linalg.matrix_exp(a)


def cross(x, y):
    return torch.linalg.cross(x, y)


MATRIX_EXP_BATCH = Known(
    (*EAGER_CHECKS, "vmap", "compile", "compiled_autograd", "export"),
    "torch.linalg.matrix_exp raises in the forward itself (autograd or not) for an input with "
    "two or more batch dims that cannot be flattened by a view (torch 2.13.0 CPU; .contiguous() "
    "first works; one batch dim works in any layout)",
    "torch.linalg.matrix_exp(torch.randn(2, 2, 2, 2, dtype=torch.float64).permute(1, 0, 2, 3)) "
    "-> RuntimeError: view size is not compatible with input tensor's size and stride (at least "
    "one dimension spans across two contiguous subspaces). Use .reshape(...) instead.",
    raises="RuntimeError",
    message=r"view size is not compatible with input tensor's size and stride",
    records=("7c9ae22267388f04", "ffffee608ded3872", "a99361439cde3727"),
)


# Identity and diagonal matrices, where these are smooth (eigvalsh's repeated
# eigenvalues are kinks); repeated singular values too, where a factorization's
# derivative is defined (qr, pinv at full rank) or a kink (svdvals).
DET_HESSIAN_REPEATED_SINGULAR = Known(
    "forward2",
    "torch.func.hessian and jacrev(jacrev) of torch.linalg.det are nan at any matrix with a "
    "repeated singular value (the identity, 2I, diag(2, -2), [[0, 1], [1, 0]], diag(1, 2, 2)), where "
    "det is a polynomial; autograd's double backward and finite differences give the right "
    "Hessian, and distinct singular values (diag(2, 3)) are right too (torch 2.13.0 CPU)",
    "torch.func.hessian(torch.linalg.det)(torch.eye(2, dtype=torch.float64)) is all nan; "
    "the double backward of det at the same point is [[0, 0, 0, 1], [0, 0, -1, 0], [0, -1, 0, "
    "0], [1, 0, 0, 0]]",
    message=r"^<w, d2f\[u, u'\]> (hessian|jacrev\(jacrev\)) vs finite differences: analytic nan",
    features=("0:structure:identity|0:structure:diagonal|0:structure:repeated_singular",),
    records=("8749a51295a3d9c1",),
    fixed_in="2.15.0",
)

MATRICES = ("identity", "diagonal")
SINGULAR = ("identity", "diagonal", "repeated_singular")


register(
    Target(
        "solve",
        solve,
        "a: *b n n, r: *b n k",
        FAMILY,
        domain=UNIT,
        max_side=3,
        structured=MATRICES,
        known=(NESTED_JVP_LINALG,),
        op="torch.linalg.solve",
    ),
    Target(
        "solve_triangular",
        solve_triangular,
        "a: *b n n, r: *b n k",
        FAMILY,
        domain=UNIT,
        max_side=3,
        kwargs={"upper": st.booleans()},
        op="torch.linalg.solve_triangular",
    ),
    Target("inv", inv, SQUARE, FAMILY, domain=UNIT, max_side=3, structured=MATRICES, op="torch.linalg.inv"),
    Target(
        "det",
        det,
        SQUARE,
        FAMILY,
        domain=UNIT,
        max_side=3,
        structured=MATRICES,
        known=(DET_GRAD_TRANSPOSED_STRIDE0, NESTED_JVP_LINALG, DET_HESSIAN_REPEATED_SINGULAR),
        op="torch.linalg.det",
    ),
    Target(
        "slogdet",
        slogdet,
        SQUARE,
        FAMILY,
        domain=UNIT,
        max_side=3,
        structured=MATRICES,
        known=(DET_GRAD_TRANSPOSED_STRIDE0, NESTED_JVP_LINALG, DET_HESSIAN_REPEATED_SINGULAR),
        op="torch.linalg.slogdet",
    ),
    Target(
        "logdet",
        logdet,
        SQUARE,
        FAMILY,
        domain=UNIT,
        max_side=3,
        structured=MATRICES,
        known=(DET_GRAD_TRANSPOSED_STRIDE0, NESTED_JVP_LINALG, DET_HESSIAN_REPEATED_SINGULAR),
        op="torch.logdet",
    ),
    Target("cholesky", cholesky, SQUARE, FAMILY, domain=UNIT, max_side=3, op="torch.linalg.cholesky"),
    Target("qr", qr, SQUARE, FAMILY, domain=UNIT, max_side=3, structured=SINGULAR, op="torch.linalg.qr"),
    Target(
        "svdvals", svdvals, "a: *b m n", FAMILY, domain=UNIT, max_side=3, structured=SINGULAR, op="torch.linalg.svdvals"
    ),
    Target("pinv", pinv, "a: *b m n", FAMILY, domain=UNIT, max_side=3, structured=SINGULAR, op="torch.linalg.pinv"),
    Target(
        "eigvalsh", eigvalsh, SQUARE, FAMILY, domain=UNIT, max_side=3, structured=MATRICES, op="torch.linalg.eigvalsh"
    ),
    # one batch dim: every layout works in eager; under vmap the batch adds one (MATRIX_EXP_BATCH)
    Target(
        "matrix_exp",
        matrix_exp,
        "a: _ n n",
        FAMILY,
        domain=UNIT,
        max_side=3,
        known=(MATRIX_EXP_BATCH,),
        op="torch.linalg.matrix_exp",
    ),
    Target(
        "matrix_exp_batched",
        matrix_exp,
        SQUARE,
        FAMILY,
        domain=UNIT,
        max_side=3,
        structured=MATRICES,
        known=(MATRIX_EXP_BATCH,),
        op="torch.linalg.matrix_exp",
    ),
    Target("cross", cross, "x: *#b 3, y: *#b 3", FAMILY, max_side=3, op="torch.linalg.cross"),
)
