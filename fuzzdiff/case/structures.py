"""Structured points: the values where hand-written derivative formulas break.

Random values almost never hit ties, exact zeros, identity or diagonal
matrices, repeated singular values, or values large enough to saturate a
softmax or cancel in a normalization; bug reports keep coming from exactly
those points. A structure is data, ``(name, k)`` in ``Values.structure`` with
``k`` choosing where or how much, applied to a tensor's sampled values when
the case materializes (fuzzdiff.case.case): a record replays it, and Hypothesis
shrinks it away (toward no structure). Everything here is elementwise NumPy
or NumPy reductions, no LAPACK: the same bits on every machine.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["STRUCTURES", "MATRIX_STRUCTURES", "WHOLE_STRUCTURES", "structured", "restored", "shift", "exp_limit"]

STRUCTURES = (
    "zeros",
    "ties",
    "identity",
    "diagonal",
    "repeated_singular",
    "large",
    "offset",
    "overflow",
    "all_zero",
    "all_equal",
)
# log of the largest finite value, by NumPy dtype name: where exp overflows
# (bfloat16 shares float32's exponent range; its values are float64 or float32 here)
_LOG_MAX = {"float64": 709.78, "complex128": 709.78, "float32": 88.72, "complex64": 88.72, "float16": 11.09}
# Applied to every matrix (the last two dims) of a tensor of rank 2 or more, a no-op below.
MATRIX_STRUCTURES = ("identity", "diagonal", "repeated_singular")
# The whole argument at one value: the identity rotation, a zero vector, a
# constant signal, a matrix of equal entries. A single exact zero ("zeros")
# misses them: a norm, an angle or a variance is zero only when every element is.
WHOLE_STRUCTURES = ("all_zero", "all_equal")

Structure = Sequence[tuple[str, int]]


def structured(x: np.ndarray, structure: Structure, low: float, high: float, exp_max: float = 709.78) -> np.ndarray:
    """``x`` (float64 or complex128, in its final shape) with each structure applied in order:

    - ``("zeros", k)``: element ``k % n`` (flat) is exactly zero;
    - ``("ties", k)``: every value snapped to one of ``2 + k % 3`` levels of
      ``[low, high]`` (ties everywhere, the maximum's included);
    - ``("identity", k)``: every matrix is the identity (``eye(m, n)``);
    - ``("diagonal", k)``: every matrix keeps its diagonal, zeros elsewhere;
    - ``("repeated_singular", k)``: every matrix is ``H1 D H2`` (Householder
      reflections from its first column and row), its top ``2 + k % (p - 1)``
      singular values equal (``p = min(m, n)``);
    - ``("large", k)``: values scaled by ``2 ** (5 + k % 6)`` (a softmax saturates);
    - ``("offset", k)``: values shifted by ``±2 ** (8 + k // 2 % 10)`` (a
      variance cancels against a large mean);
    - ``("overflow", k)``: values scaled so that the largest one (``k % 4 <
      3``) or the most negative is ``±exp_max * (1 + k // 4 % 8 / 8)``, past
      where ``exp`` overflows in the case's dtype (``exp_max``: log of its
      largest value, ``exp_limit``);
    - ``("all_zero", k)``: every element exactly zero;
    - ``("all_equal", k)``: every element equal to element ``k % n`` (flat).
    """
    n = x.size
    if not n:
        return x
    for name, k in structure:
        if name == "zeros":
            x = x.copy()
            x.reshape(-1)[k % n] = 0.0
        elif name == "ties":
            x = _snapped(x, 2 + k % 3, low, high)
        elif name == "large":
            x = x * 2.0 ** (5 + k % 6)
        elif name == "offset":
            x = x + (-1.0 if k % 2 else 1.0) * 2.0 ** (8 + k // 2 % 10)
        elif name == "all_zero":
            x = np.zeros_like(x)
        elif name == "all_equal":
            x = np.full_like(x, x.reshape(-1)[k % n])
        elif name == "overflow":
            real = x.real if np.iscomplexobj(x) else x
            # the largest value (three k in four) or the most negative lands past the limit
            top = float(np.max(real) if k % 4 != 3 else -np.min(real))
            if not top > 0:
                top = float(np.max(np.abs(real)))
            if top > 0:
                x = x * (exp_max * (1 + k // 4 % 8 / 8) / top)
        elif x.ndim >= 2:
            m, c = x.shape[-2:]
            eye = np.eye(m, c)
            if name == "identity":
                x = np.broadcast_to(eye, x.shape).astype(x.dtype)
            elif name == "diagonal":
                x = x * eye
            else:
                x = _repeated_singular(x, k)
    return x


def exp_limit(dtype_name: str) -> float:
    """log of the largest finite value of a dtype (by name: "float32"): where exp overflows."""
    return _LOG_MAX.get(dtype_name.removeprefix("torch."), _LOG_MAX["float32"])


def shift(structure: Structure) -> float:
    """How far ``"offset"`` moves the values (0 without it): a nudge of a
    fraction of the range moves them by that fraction of this too, so that a
    float32-rounding nudge (fuzzdiff.confirm.low_precision's conditioning estimate) is one
    at their magnitude."""
    return max((2.0 ** (8 + k // 2 % 10) for name, k in structure if name == "offset"), default=0.0)


def restored(moved: np.ndarray, original: np.ndarray, structure: Structure) -> np.ndarray:
    """Pinned values ``moved`` to a neighbouring point, their ``structure`` put
    back (``original``: the pinned values before the move). Zeros and diagonals
    are projected back; tied values move level by level (``level_moved``);
    identities and repeated singular values cannot be moved while kept, and
    stay where they were, and so does an all-zero argument; equal values
    move together (``level_moved``); scaled or shifted values keep their
    scale when moved."""
    names = {name for name, _ in structure}
    if names & {"identity", "repeated_singular", "all_zero"}:
        return original
    if "all_equal" in names:  # the structures before it are overwritten: nothing else to put back
        return level_moved(original, moved)
    x = level_moved(original, moved) if "ties" in names else moved
    for name, k in structure:
        if name == "zeros" and x.size:
            x = x.copy()
            x.reshape(-1)[k % x.size] = 0.0
        elif name == "diagonal" and x.ndim >= 2:
            x = x * np.eye(*x.shape[-2:])
    return x


def level_moved(original: np.ndarray, moved: np.ndarray) -> np.ndarray:
    """``original`` with each of its distinct values moved as ``moved`` moves
    the first element that holds it: tied values move together and still
    tie, and exact zeros stay zero. A nudge that keeps ties must move them so:
    snapped back to their levels, the values would not move at all, and a
    conditioning estimate at a tie would see none of the problem's own."""
    flat = original.reshape(-1)
    if np.iscomplexobj(flat) or not flat.size:
        return original
    _, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
    delta = (moved.reshape(-1) - flat)[first][inverse.reshape(-1)]
    return np.where(flat == 0, flat, flat + delta).reshape(original.shape)


def _snapped(x: np.ndarray, levels: int, low: float, high: float) -> np.ndarray:
    if np.iscomplexobj(x):
        return _snapped(x.real, levels, low, high) + 1j * _snapped(x.imag, levels, low, high)
    span = high - low
    if not span > 0:
        return x
    q = np.clip(np.floor((x - low) * (levels / span)), 0, levels - 1)
    return low + (q + 0.5) * (span / levels)


def _repeated_singular(x: np.ndarray, k: int) -> np.ndarray:
    m, c = x.shape[-2:]
    p = min(m, c)
    if p < 2:
        return x
    real = x.real if np.iscomplexobj(x) else x
    r = 2 + k % (p - 1)
    diag = np.abs(np.diagonal(real, axis1=-2, axis2=-1))  # (..., p)
    s = 1.0 + np.sort(diag, axis=-1)[..., ::-1]
    s[..., 1:r] = s[..., :1]
    w1, w2 = real[..., :, 0] + 1.0, real[..., 0, :] - 1.0  # shifted: never all zero in practice
    c1 = 2.0 / np.maximum(np.sum(w1 * w1, axis=-1), 1e-300)
    c2 = 2.0 / np.maximum(np.sum(w2 * w2, axis=-1), 1e-300)
    d = np.zeros(real.shape)
    idx = np.arange(p)
    d[..., idx, idx] = s
    # H1 D = D - c1 w1 (w1^T D), and (H1 D) H2 = B - c2 (B w2) w2^T: elementwise and sums only.
    row = np.zeros(real.shape[:-2] + (c,))
    row[..., :p] = w1[..., :p] * s
    b = d - c1[..., None, None] * w1[..., :, None] * row[..., None, :]
    bw = np.sum(b * w2[..., None, :], axis=-1)
    a = b - c2[..., None, None] * bw[..., :, None] * w2[..., None, :]
    return a.astype(x.dtype)
