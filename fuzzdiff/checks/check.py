"""What a check is: one identity between two paths, plus what it needs drawn."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from hypothesis.strategies import SearchStrategy

from fuzzdiff.case.case import Case
from fuzzdiff.checks.fragment import Fragment, ScriptContext
from fuzzdiff.config import FuzzConfig
from fuzzdiff.targets.role import OpInfoRole
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict
from strategies.cotangents import probe_dicts

__all__ = ["Check", "CiSample", "Cost", "DEFAULT_COST", "OpInfoRole", "ProbeParams", "probe_params"]


@dataclass(frozen=True)
class ProbeParams:
    """A check's params strategy that draws one Probe (as a dict) per key:
    the cotangents and directions most checks need. fuzzdiff.search.runner sees this
    class and makes the same draws inline, without a nested strategy."""

    keys: tuple[str, ...]

    def __call__(self, target: Target, case: Case) -> SearchStrategy:
        return _probe_dicts(self.keys)


@functools.cache
def _probe_dicts(keys: tuple[str, ...]) -> SearchStrategy:
    # Built once: Hypothesis validates every fresh strategy object, per draw.
    return probe_dicts(keys)


def probe_params(*keys: str) -> ProbeParams:
    return ProbeParams(tuple(keys))


def _always(target: Target) -> str | None:
    return None


@dataclass(frozen=True)
class CiSample:
    """The CI profile's share of a check too costly to run on every catalog
    target: ``targets`` of them drawn with a rotating seed (tests/fuzz prints
    it), every target whose name matches one of the ``always`` globs, and at
    most ``max_examples`` drawn cases each. Other profiles run every target."""

    targets: int
    always: tuple[str, ...] = ()
    max_examples: int | None = None


@dataclass(frozen=True)
class Cost:
    """Worker-seconds of a check: a batch's own (``batch``) and one example's at
    2 variants (``example``). Both budgets are planned from it: a campaign's
    first round (fuzzdiff.campaign.plan) and one ``fuzzdiff.check`` call's share
    of its time per check (fuzzdiff.checking.budget)."""

    batch: float
    example: float


# The checks' costs are from `python bench/campaign.py --budget 600 --seed 1` ("worker
# time by check": seconds a batch S, milliseconds a run M) on 2 vCPUs, torch 2.13.0+cpu,
# split as 0.3 S for the batch and 1.4 M / 1000 an example. A check that states none
# costs DEFAULT_COST.
DEFAULT_COST = Cost(0.1, 0.01)


@dataclass(frozen=True)
class Check:
    """name:     the stable check name (docs/pages/design.md, contract 3).
    run:      the identity, ``run(target, case) -> Verdict``; pure, no Hypothesis.
    params:   ``params(target, case)`` -> strategy for the check's own draws
              (probes, alternative layouts, ...), stored in ``case.params``.
    applies:  ``applies(target)`` -> None, or why the check cannot apply.
    dtypes:   the case dtypes the check is about (None: any the target supports).
    aliasing: "any", "required" (the check is about aliased inputs) or "never".
    ci:       a CiSample, for a check the CI profile runs on a sample of targets.
    compiles: the check compiles code, so its examples cost seconds (a first
              compile), not milliseconds: campaigns run it last and in fewer examples.
    configure: ``configure(check, config)`` -> the check under a FuzzConfig.
    script:   ``script(ctx) -> Fragment``: the check's standalone script
              (fuzzdiff.checks.fragment), written beside the identity it restates.
    seeds_random: the check seeds a random target's generators itself
              (checkpoint: once per side, since a recomputation must see the
              draws checkpoint restores, not a reseeding). Otherwise every call
              of a ``Target.random`` target is seeded alike (fuzzdiff.search.runner).
    cost:     what a batch and an example of the check cost (Cost).
    opinfo:   the check's role in torch's OpInfo tests (fuzzdiff.targets.role):
              the flags and tests that stand for it; None: it does not run on
              OpInfo targets.
    """

    name: str
    run: Callable[[Target, Case], Verdict]
    params: Callable[[Target, Case], SearchStrategy] = probe_params("cotangent", "direction")
    applies: Callable[[Target], str | None] = _always
    dtypes: tuple[torch.dtype, ...] | None = None
    aliasing: str = "any"
    needs_grad: bool = True
    ci: CiSample | None = None
    compiles: bool = False
    configure: Callable[[Check, FuzzConfig], Check] | None = None
    script: Callable[[ScriptContext], Fragment] | None = None
    seeds_random: bool = False
    cost: Cost = DEFAULT_COST
    opinfo: OpInfoRole | None = None

    def configured(self, config: FuzzConfig) -> Check:
        """This check with the run's settings applied (the compile check's backends)."""
        return self if self.configure is None else self.configure(self, config)

    def why_not(self, target: Target) -> str | None:
        """None when the check applies to ``target``, else the reason it does not."""
        if target.only is not None and self.name not in target.only.checks:
            return target.only.reason
        if self.name in target.skip:
            return target.skip[self.name]
        declined = target.declines(self.name, self.opinfo)
        if declined is not None:
            return declined
        if self.needs_grad and not any(target.differentiable(a.name) for a in target.args):
            return "the target has no differentiable argument"
        if self.dtypes is not None and not set(self.dtypes) & set(target.dtypes):
            return f"the target supports none of {[str(d) for d in self.dtypes]}"
        return self.applies(target)
