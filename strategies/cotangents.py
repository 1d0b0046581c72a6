"""Cotangents and tangents: random, non-unit, sometimes expanded, strided or sparse.

All-ones cotangents hide every bug that mixes up which output element a gradient
came from; these never are all ones.
"""

import functools

from hypothesis import strategies as st

from fuzzdiff.case import Probe

__all__ = ["probes"]


@functools.cache
def probes():
    """A Probe: a recipe for a tensor shaped like an output known only at run time."""
    # One shared strategy object: checks ask for it on every draw, and Hypothesis
    # validates each fresh strategy object again.
    return st.builds(Probe, seed=st.integers(0, 2**32 - 1),
                     layout=st.sampled_from(("contiguous", "expanded", "transposed")),
                     zeros=st.sampled_from((0.0, 0.5)))
