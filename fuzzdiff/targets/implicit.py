"""A sample that torch differentiates implicitly, described as data.

Gamma-family samples are drawn by rejection (``torch._standard_gamma``, and
``torch._sample_dirichlet`` built on it). torch does not differentiate the
sampler's code path: it differentiates the sample ``z`` holding its CDF
``F(z; θ)`` fixed, ``dz/dθ = -(∂F/∂θ)(z; θ) / p(z; θ)`` (implicit
reparameterization). A target whose output is such a sample says so with an
``Implicit``: how to get the CDF and the density at the target's own
arguments, so that the implicit_rsample check (fuzzdiff.checks.implicit_rsample)
can test the identity torch promises. The functions are the target's, called
in float64 as ``cdf(z, *args, **kwargs)``; targets never import the checks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Implicit"]


@dataclass(frozen=True)
class Implicit:
    """density:  ``density(z, *args, **kwargs) -> p(z; θ)``, elementwise in the sample.
    cdf:      ``cdf(z, *args, **kwargs) -> F(z; θ)`` where torch has one
              (``Gamma.cdf``); None: the check integrates ``density`` from
              ``lower`` to ``z`` numerically (Beta has no CDF in torch).
    lower:    where the support starts, for that integral.
    samplers: the torch functions that draw the sample (``_standard_gamma``):
              code that calls them meets this target's known discrepancies
              of finite differences at a fixed seed (fuzzdiff.search.blame).
    """

    density: Callable[..., Any]
    cdf: Callable[..., Any] | None = None
    lower: float = 0.0
    samplers: tuple[str, ...] = ()
