"""Cotangents and tangents: random, non-unit, sometimes expanded, strided or sparse.

All-ones cotangents hide every bug that mixes up which output element a gradient
came from; these never are all ones.
"""

import functools

from hypothesis import strategies as st

from fuzzdiff.case import Probe
from strategies._drawing import eager

__all__ = ["probes"]


LAYOUTS = ("contiguous", "expanded", "transposed")
ZEROS = (0.0, 0.5)


def probe_from_code(code: int) -> Probe:
    """One integer decides seed, layout and zeros; 0 is the plainest probe."""
    return Probe(seed=code, layout=LAYOUTS[code % 3], zeros=ZEROS[(code // 3) % 2])


@functools.cache
def probes():
    """A Probe: a recipe for a tensor shaped like an output known only at run time.

    A single draw (probes are drawn two or three times per example, and each
    Hypothesis draw costs more than the torch work of a small example); it
    shrinks toward seed 0, contiguous, no zeros.
    """
    return PROBE_CODES.map(probe_from_code)


PROBE_CODES = eager(st.integers(0, 2**32 - 1))
