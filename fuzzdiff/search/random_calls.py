"""Whether a function draws random numbers it did not declare: asked by calling it.

A function whose outputs differ between two calls on the same inputs (an
undeclared dropout, a draw of Python's ``random``) is no function of its
inputs, and finite differences of it are noise: their error estimate grows
with the noise and swallows a wrong gradient. ``fuzzdiff.check`` asks once,
before its checks, at a few drawn inputs. Where seeding torch's generators,
Python's ``random`` and numpy's global generator alike makes two calls agree,
the target is checked as a random one (every call seeded alike,
fuzzdiff.targets.randomness); where even that leaves them apart (a private
generator, a state that changes from call to call), every check that compares
calls is unsupported, with that reason. Differences at rounding level (a
reduction whose order varies between runs) are not randomness.

Two calls that agree may still draw: from a generator the function seeds
itself (a fixed ``seed=`` of a library's random projections). Such a function
is deterministic, but a float32 and a float64 call draw other numbers from
that seed, so it is checked as a random one too; torch's own random ops
(tagged ``nondeterministic_seeded``) are watched during the calls to see it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
from hypothesis import find
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample, Unsatisfiable
from torch.utils._pytree import tree_leaves

from fuzzdiff.case.case import Case
from fuzzdiff.checks import CHECKS
from fuzzdiff.guards.random_ops import RandomOps
from fuzzdiff.guards.timeout import ExampleTimeout, limited
from fuzzdiff.paths.seeded import run_seeded, seed_generators
from fuzzdiff.targets.randomness import seeded_alike
from fuzzdiff.targets.target import Target
from strategies._drawing import FIND
from strategies.cases import cases

__all__ = [
    "with_randomness",
    "cases_in",
    "differ",
    "SEEDED",
    "SELF_SEEDED",
    "UNSEEDABLE",
    "UNSEEDABLE_WARNING",
    "INPUTS",
]

INPUTS = 3  # drawn inputs the function is called at: a mask may agree once by chance
ROUNDING = 2.0**10  # ulps of an output's largest magnitude that two runs may differ by
SEED = 0x5EED
# the check that asks nothing of two calls: it watches the inputs' memory
COMPARES_NO_CALLS = frozenset({"mutation"})

SEEDED = (
    "fuzzdiff: random: outputs differ between calls on the same inputs; every call is seeded alike "
    "(torch's generators, Python's random, numpy's global generator)"
)
SELF_SEEDED = (
    "fuzzdiff: random: the function draws random numbers ({ops}) from a generator it seeds itself; "
    "two calls agree, but calls in other dtypes, layouts or batches draw other numbers, so the checks "
    "that compare such calls are skipped"
)
UNSEEDABLE = (
    "random in a way fuzzdiff cannot seed: outputs differ between calls on the same inputs, even "
    "with torch's generators, Python's random and numpy's global generator seeded alike before "
    "each (a private generator, or a state that changes from call to call)"
)
UNSEEDABLE_WARNING = (
    "fuzzdiff: random in a way fuzzdiff cannot seed: outputs differ between calls on the same inputs "
    "even seeded alike; the checks that compare calls are unsupported"
)


def with_randomness(target: Target, timeout: float = 0.0, calling: Callable[[Case], None] | None = None) -> Target:
    """``target``, as a random one if its outputs differ between calls on the
    same inputs; a warning says so. A target declared random is not asked.
    A probe that runs past ``timeout`` seconds (0: no limit) answers nothing:
    the checks then report the hang, as a ``timeout`` record. ``calling(case)``
    is told each case before the function is called at it (a journal: a case
    that kills the process becomes a crash record)."""
    if target.random:
        return target
    try:
        with limited(timeout):
            # the calls draw from the caller's generators: run_seeded gives them back as they were
            verdict = run_seeded(SEED, lambda: _randomness(target, calling))
    except ExampleTimeout:
        return target
    if verdict == "seeded":
        warnings.warn(SEEDED, stacklevel=2)
        return seeded_alike(target)
    if verdict is not None and verdict.startswith("self-seeded"):
        warnings.warn(SELF_SEEDED.format(ops=verdict.partition(": ")[2]), stacklevel=2)
        return seeded_alike(target)
    if verdict == "unseedable":
        warnings.warn(UNSEEDABLE_WARNING, stacklevel=2)
        skip = {name: UNSEEDABLE for name in CHECKS if name not in COMPARES_NO_CALLS}
        return replace(target, skip={**skip, **target.skip})
    return target


def _randomness(target: Target, calling: Callable[[Case], None] | None = None) -> str | None:
    """The verdict: "seeded", "unseedable", "self-seeded: OPS" where two calls
    agreed but drew random numbers, or None where two calls agreed at every
    probe without drawing (or raised: the checks report that at their own inputs)."""
    drawn = RandomOps()
    for case in cases_in(target):
        if calling is not None:
            calling(case)
        with drawn:
            differed = _differ_twice(target, case, seeded=False)
        if not differed:
            continue
        still = _differ_twice(target, case, seeded=True)
        if still is not None:
            return "unseedable" if still else "seeded"
    if drawn.ops:
        return "self-seeded: " + ", ".join(sorted(drawn.ops))
    return None


def _differ_twice(target: Target, case: Case, seeded: bool) -> bool | None:
    """Whether two calls on fresh copies of ``case``'s inputs differ (None:
    one raised), each from the same seed if ``seeded``."""
    outputs = []
    for _ in range(2):
        if seeded:
            seed_generators(SEED)
        outputs.append(_call(target, case))
    first, second = outputs
    if first is None or second is None:
        return None
    return differ(first, second)


def cases_in(target: Target, dtype: torch.dtype | None = None) -> list[Case]:
    """INPUTS small cases of ``target`` with no empty argument, contiguous,
    in ``dtype`` (default float64 where it takes it), found without
    randomness of fuzzdiff's own."""
    if dtype is None:
        dtype = torch.float64 if torch.float64 in target.dtypes else target.dtypes[0]
    one = cases(
        target, dtypes=(dtype,), layout_features=(), alias=False, specials=False, structured=False, devices=("cpu",)
    )
    several = st.lists(one, min_size=INPUTS, max_size=INPUTS)
    try:
        return find(several, lambda found: all(math.prod(a.shape) > 1 for c in found for a in c.args), settings=FIND)
    except NoSuchExample:  # sizes pinned at 0 or 1: ask where the spec lets it
        pass
    try:
        return find(several, lambda found: True, settings=FIND)
    except (NoSuchExample, Unsatisfiable):  # no input to ask at: the checks will say why
        return []


def _call(target: Target, case: Case) -> list[Any] | None:
    """The outputs of one call on fresh inputs; None where it raises (the
    checks report that, at their own inputs)."""
    args = case.materialize(requires_grad=False).args
    try:
        return tree_leaves(target(*args, **case.kwargs))
    except Exception:  # noqa: BLE001 - any error of the user's function: no answer here
        return None


def differ(first: Sequence[Any], second: Sequence[Any]) -> bool:
    """Whether two calls' outputs differ by more than rounding."""
    if len(first) != len(second):
        return True
    return any(_differ(a, b) for a, b in zip(first, second))


def _differ(a: Any, b: Any) -> bool:
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return False
        return type(a) is not type(b) or a != b
    if a.shape != b.shape or a.dtype != b.dtype:
        return True
    a, b = a.detach(), b.detach()
    if not (a.is_floating_point() or a.is_complex()):
        return not torch.equal(a, b)
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    eps = torch.finfo(a.dtype).eps
    finite = a.isfinite() & b.isfinite()
    # nan where nan, the same infinities: what no rounding changes
    if not torch.equal(finite, a.isfinite()) or not torch.equal(a[~finite].isnan(), b[~finite].isnan()):
        return True
    if not torch.equal(a[~finite].nan_to_num(), b[~finite].nan_to_num()):
        return True
    a, b = a[finite].double(), b[finite].double()
    if a.numel() == 0:
        return False
    scale = max(a.abs().max().item(), b.abs().max().item())
    return (a - b).abs().max().item() > ROUNDING * eps * scale
