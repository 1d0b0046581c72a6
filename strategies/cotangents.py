"""Cotangents and tangents: random, non-unit, sometimes expanded, strided or sparse.

All-ones cotangents hide every bug that mixes up which output element a gradient
came from; these never are all ones.
"""

import functools
from typing import Any

from hypothesis import strategies as st
from hypothesis.strategies import DrawFn, SearchStrategy

from fuzzdiff.case.values import Probe
from strategies._drawing import integers

__all__ = ["probes", "probe_dicts", "draw_probe_dicts"]


LAYOUTS = ("contiguous", "expanded", "transposed")
ZEROS = (0.0, 0.5)


def probe_from_code(code: int) -> Probe:
    """One integer decides seed, layout and zeros; 0 is the plainest probe."""
    return Probe(seed=code, layout=LAYOUTS[code % 3], zeros=ZEROS[(code // 3) % 2])


@functools.cache
def probes() -> SearchStrategy[Probe]:
    """A Probe: a recipe for a tensor shaped like an output known only at run time.

    A single draw (probes are drawn two or three times per example, and each
    Hypothesis draw costs more than the torch work of a small example); it
    shrinks toward seed 0, contiguous, no zeros.
    """
    return PROBE_CODES.map(probe_from_code)


PROBE_CODES = integers(0, 2**32 - 1)


def draw_probe_dicts(draw: DrawFn, keys: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """One probe per key, as the dict a case stores, from one integer of 32
    bits per probe (one draw instead of one per probe); 0 gives the plainest."""
    code = draw(integers(0, 2 ** (32 * len(keys)) - 1))
    return {k: probe_from_code(code >> (32 * i) & 0xFFFF_FFFF).__dict__.copy() for i, k in enumerate(keys)}


@st.composite
def probe_dicts(draw: DrawFn, keys: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """``draw_probe_dicts`` as a strategy: the params of a check that draws only probes."""
    return draw_probe_dicts(draw, keys)
