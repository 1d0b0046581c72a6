"""What a check costs: the worker-seconds of a batch and of one example.

Both budgets are planned from it: a campaign's first round (fuzzdiff.campaign.plan)
and one ``fuzzdiff.check`` call's share of its time per check (fuzzdiff.api).
"""

from __future__ import annotations

__all__ = ["COSTS", "DEFAULT_COST", "example_cost"]

# Worker-seconds of one batch of a check: (a batch's own cost, the cost of one
# example at 2 variants). From `python bench/campaign.py --budget 600 --seed 1`
# ("worker time by check": seconds a batch S, milliseconds a run M) on 2 vCPUs,
# torch 2.13.0+cpu, split as 0.3 S for the batch and 1.4 M / 1000 an example.
# A check not listed costs DEFAULT_COST. compile's (0.97 s a batch, 80.9 ms a run)
# from a run of the same command in which a compile pair's first batch draws the
# cheap backends (fuzzdiff.campaign.loop.CHEAP_BACKENDS), no code generation in them.
COSTS: dict[str, tuple[float, float]] = {
    "grad": (0.015, 0.0027),
    "forward": (0.021, 0.0036),
    "gradgrad": (0.036, 0.0063),
    "layout": (0.021, 0.0036),
    "alias": (0.018, 0.0031),
    "mutation": (0.012, 0.0020),
    "dtype": (0.018, 0.0029),
    "vmap": (0.039, 0.0062),
    "opcheck": (0.93, 0.045),
    "per_sample": (0.21, 0.010),
    "backend": (0.045, 0.0021),
    "checkpoint": (0.081, 0.0041),
    "forward2": (0.084, 0.0144),
    "compile": (0.29, 0.113),
}
DEFAULT_COST = (0.1, 0.01)


def example_cost(check: str) -> float:
    """Seconds of one example of ``check`` (at 2 variants), from COSTS."""
    return COSTS.get(check, DEFAULT_COST)[1]
