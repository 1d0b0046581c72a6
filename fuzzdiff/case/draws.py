"""Counter-based random numbers: splitmix64 of (seed, counter), in NumPy.

Every random tensor of a case — values, memory around views, probes, nudges,
module parameters — comes from this stream, never from torch's generator
(module parameters through a plain-Python copy that standalone scripts can
carry: fuzzdiff.targets.catalog.modules.grid_parameters): torch does
not promise its streams across versions or between CPU and CUDA, and a corpus
record must replay bit for bit under another torch. Word ``i`` of a stream is
a pure function of ``(seed, stream, i)``, computed in uint64 arithmetic; floats
come from exact integer-to-float conversions and IEEE ``+ - * /`` only (no libm),
so the numbers are the same on every platform and NumPy version.

The stream is splitmix64 (Steele, Lea and Flood, 2014) read at any position::

    state = (seed + stream * 2**56 + (i + 1) * GAMMA) mod 2**64
    z = (state ^ state >> 30) * M1;  z = (z ^ z >> 27) * M2;  word = z ^ z >> 31

Changing anything here changes every record's probes and batch examples:
bump ``SCHEME``, which corpus records store.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = [
    "SCHEME",
    "VALUES",
    "NUDGES",
    "PROBES",
    "PARAMETERS",
    "POINTS",
    "ROUNDING",
    "words",
    "uniform",
    "integers",
    "bits",
    "permutation",
    "normal",
]

SCHEME = "splitmix64-v1"

# Streams: one seed gives independent numbers for each purpose.
VALUES, NUDGES, PROBES, PARAMETERS, POINTS, ROUNDING = range(6)

GAMMA = 0x9E3779B97F4A7C15
M1 = 0xBF58476D1CE4E5B9
M2 = 0x94D049BB133111EB
_MASK = (1 << 64) - 1
_LOW32 = (1 << 32) - 1
_U = np.uint64


def _u64(x: int) -> np.ndarray:
    """``x`` as a 0-d uint64 array: NumPy combines those with arrays in half
    the time it takes for a NumPy scalar."""
    return np.array(x, dtype=np.uint64)


_M1, _M2 = _u64(M1), _u64(M2)
_S30, _S27, _S31, _S11, _S32 = _u64(30), _u64(27), _u64(31), _u64(11), _u64(32)
_TOP = _u64(1 << 63)
_SQRT3 = 1.7320508075688772  # sqrt(3), correctly rounded


@functools.lru_cache(maxsize=256)
def _steps(n: int) -> np.ndarray:
    """``(i + 1) * GAMMA`` for i < n, made once per length (read-only)."""
    out = np.arange(1, n + 1, dtype=np.uint64)
    out *= _U(GAMMA)
    out.flags.writeable = False
    return out


# Below this many words a block is computed in Python integers: a NumPy call
# costs about half a microsecond whatever its length, and most blocks are tiny
# (a probe for a scalar output, the memory around a small view).
SMALL_BLOCK = 8


def words(seed: int, n: int, stream: int = VALUES, start: int = 0) -> np.ndarray:
    """Words ``start .. start + n - 1`` of stream ``(seed, stream)``: uint64[n].

    A draw needing several kinds of numbers takes one block and slices it:
    nine NumPy calls per block, whatever its length (a small block: the same
    words from Python integers)."""
    key = (int(seed) + (stream << 56) + start * GAMMA) & _MASK
    if n < SMALL_BLOCK:
        return np.array(_small_block(key, n), dtype=np.uint64)
    z = _steps(n) + _u64(key)
    z ^= z >> _S30
    z *= _M1
    z ^= z >> _S27
    z *= _M2
    z ^= z >> _S31
    return z


def _small_block(key: int, n: int) -> list[int]:
    """``words`` for a short block, in exact integer arithmetic."""
    out = []
    for i in range(1, n + 1):
        z = (key + i * GAMMA) & _MASK
        z = ((z ^ z >> 30) * M1) & _MASK
        z = ((z ^ z >> 27) * M2) & _MASK
        out.append(z ^ z >> 31)
    return out


def uniform(z: np.ndarray, low: float = 0.0, high: float = 1.0) -> np.ndarray:
    """``u * (high - low) + low`` per word, ``u = (z >> 11) * 2**-53`` in [0, 1):
    a dyadic rational, exact in float64."""
    span = float(high) - float(low)
    scale = span * 2.0**-53
    if len(z) < SMALL_BLOCK:  # the same roundings, in Python floats
        low = float(low)
        if abs(scale) >= 2.0**-1022 or span == 0.0:
            return np.array([(w >> 11) * scale + low for w in z.tolist()], dtype=np.float64)
        return np.array([(w >> 11) * 2.0**-53 * span + low for w in z.tolist()], dtype=np.float64)
    if abs(scale) >= 2.0**-1022 or span == 0.0:  # scaling by 2**-53 stayed exact: one product
        x = np.multiply(z >> _S11, scale, dtype=np.float64)
    else:
        x = np.multiply(z >> _S11, 2.0**-53, dtype=np.float64)
        x *= span
    x += low
    return x


def integers(z: np.ndarray, low: int, high: int) -> np.ndarray:
    """Integers in [low, high] (int64): ``low + (z >> 32) * span >> 32``, the
    high half of a 32x32-bit product; a bias below span / 2**32."""
    span = int(high) - int(low) + 1
    if not 0 < span <= 1 << 32:
        raise ValueError(f"integers({low}, {high}): need 1 <= high - low + 1 <= 2**32")
    if len(z) < SMALL_BLOCK:
        return np.array([((w >> 32) * span >> 32) + int(low) for w in z.tolist()], dtype=np.int64)
    x = z >> _S32
    x *= _u64(span)
    x >>= _S32
    out = x.view(np.int64)  # below 2**32: the same bits
    out += low
    return out


def bits(z: np.ndarray) -> np.ndarray:
    """Bernoulli(1/2) per word, from its top bit (bool)."""
    return z >= _TOP


def permutation(z: np.ndarray) -> np.ndarray:
    """A uniformly random permutation of ``range(len(z))`` (int64): the order
    of the words as random keys (a stable sort: ties, however unlikely, break
    by position)."""
    return np.argsort(z, kind="stable").astype(np.int64, copy=False)


def normal(z: np.ndarray, mean: float = 0.0, std: float = 1.0) -> np.ndarray:
    """``len(z) // 2`` roughly normal variates from a contiguous block:
    Irwin-Hall of order 4 (the sum of the four 32-bit halves of words 2i and
    2i+1, centred and scaled to unit variance; bell-shaped, bounded by
    ±2·sqrt(3)), then ``* std + mean``.

    No libm: an exact sum of integers, then two IEEE roundings."""
    n = len(z) // 2
    if n < SMALL_BLOCK:  # the same two roundings per value, in Python floats
        scale, low, pairs = std * _SQRT3 * 2.0**-32, -2.0 * (2**32 - 1), z[: 2 * n].tolist()
        return np.array(
            [
                (low + ((a & _LOW32) + (a >> 32) + (b & _LOW32) + (b >> 32))) * scale + mean
                for a, b in zip(pairs[::2], pairs[1::2])
            ],
            dtype=np.float64,
        )
    halves = z[: 2 * n].view(np.uint32).reshape(n, 4)
    # centred from the start: integers below 2**35, exact in float64 in any order
    s = np.add.reduce(halves, axis=1, dtype=np.float64, initial=-2.0 * (2**32 - 1))
    s *= std * _SQRT3 * 2.0**-32  # the sum's variance is 4 (2**64 - 1) / 12
    s += mean
    return s
