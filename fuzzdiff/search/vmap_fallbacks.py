"""Which ops vmap runs through its slow per-example fallback (no batching
rule): a coverage report for ``fuzzdiff list --vmap-fallbacks``, not a check.
It draws a case, so it sits above the runner."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from hypothesis import find
from hypothesis.errors import NoSuchExample

from fuzzdiff.case.case import Case
from fuzzdiff.checks.vmap import CHECK
from fuzzdiff.guards.unsupported import unsupported_reason
from fuzzdiff.paths import vmap as path
from fuzzdiff.search.runner import case_strategy
from fuzzdiff.targets.target import Target
from strategies._drawing import FIND
from strategies.batching import COMPOSITIONS

__all__ = ["fallbacks", "fallback_report"]


def _sample(target: Target) -> Case:
    """One small case of ``target`` with non-empty arguments, found without randomness."""
    base = case_strategy(CHECK, target, layout_features=(), specials=False)
    try:
        return find(base, lambda c: all(0 not in a.shape for a in c.args), settings=FIND)
    except NoSuchExample:
        return find(base, lambda c: True, settings=FIND)


def fallbacks(target: Target, batch: int = 2) -> list[str]:
    """The ops that hit vmap's per-example fallback (no batching rule) on one
    sample of ``target``, over every composition, every argument batched at dim 0."""
    case = _sample(target)
    ops: list[str] = []
    for composition in COMPOSITIONS:
        levels = [{"batch": batch, "in_dims": [0] * len(case.args), "out_dims": [0]}] * (
            2 if composition == "vmap_vmap" else 1
        )
        plan = {"composition": composition, "levels": levels, "batched_layouts": [None] * len(case.args)}
        with path.recording_fallbacks() as seen:
            try:
                path.run(target, replace(case, params={**case.params, **plan}))
            except Exception as e:  # noqa: BLE001 - coverage only; the check judges errors
                if unsupported_reason(e) is None:
                    seen.append(f"(raised {type(e).__name__} in {composition})")
        ops += [op for op in seen if op not in ops]
    return ops


def fallback_report(targets: Iterable[Target]) -> dict[str, list[str]]:
    """Target name -> the ops vmap falls back on, for every target the check applies to."""
    return {t.name: fallbacks(t) for t in targets if CHECK.why_not(t) is None}
