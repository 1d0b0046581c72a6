"""A target found to draw random numbers, and what it can still be asked.

Seeded alike before every call (``Target.random``, fuzzdiff.search.runner), a random
function is a deterministic one, so its derivatives can be checked. Some
comparisons stay unfair even then: they compare two calls that consume the
generators differently. The catalog's random layers skip those one by one,
knowing what each draws; a user's function is not known, so every such
check is skipped with its reason.
"""

from __future__ import annotations

from dataclasses import replace

from fuzzdiff.targets.target import Target

__all__ = ["SEEDED_SKIPS", "seeded_alike"]

# check -> why it compares calls that draw other random numbers from one seed
SEEDED_SKIPS = {
    "dtype": "the target draws random numbers, and float32 and float64 runs draw other numbers "
    "from one seed (uniform and bernoulli round their draws to the dtype)",
    "layout": "the target draws random numbers, and from one seed two memory layouts of the same "
    "values may draw differently (dropout draws its mask in its input's layout)",
    "device": "the target draws random numbers, and CUDA's generator draws other numbers than the CPU's",
    "per_sample": "the target draws random numbers, and a batch draws other numbers than its samples one by one",
}


def seeded_alike(target: Target) -> Target:
    """``target`` as a random one: every call seeded alike, the unfair checks skipped."""
    return replace(target, random=True, skip={**SEEDED_SKIPS, **target.skip})
