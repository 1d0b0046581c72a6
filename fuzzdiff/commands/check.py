"""``fuzzdiff check``: fuzz the user's own function, autograd.Function or custom op (fuzzdiff.api.check)."""

from __future__ import annotations

from dataclasses import replace

import torch

from fuzzdiff import api
from fuzzdiff.case.spec import SpecError
from fuzzdiff.checks import CHECKS, UnknownCheck, get_check
from fuzzdiff.commands.options import (
    UsageError,
    at_least_one,
    corpus_root,
    dtypes_option,
    positive,
    resolve_config,
    split,
)
from fuzzdiff.commands.signals import stops_interrupt
from fuzzdiff.search.fuzzing import settle_heap
from fuzzdiff.targets.user import user_target
from fuzzdiff.targets.user_import import import_object

__all__ = ["cmd_check"]


def cmd_check(args) -> int:
    settle_heap()  # the command's own process

    try:
        fn = import_object(args.target)
    except ValueError as e:
        raise UsageError(str(e)) from None
    dtypes = dtypes_option(args.dtypes) or [torch.float64, torch.float32]
    checks = split(args.checks)
    sizes = _sizes(args.sizes)
    try:
        target = user_target(fn, args.spec, dtypes=dtypes, domain=_domain(args.domain), sizes=sizes)
        for name in checks or ():
            get_check(name)
    except (SpecError, UnknownCheck, TypeError, ValueError) as e:
        raise UsageError(f"{args.target}: {e}") from None
    at_least_one(args.max_examples, "--max-examples")
    at_least_one(args.variants, "--variants")
    positive(args.budget, "--budget", " (inf: no limit)")
    try:
        structured = api.hard_values(target.domain) if args.structured is None else tuple(args.structured)
        target = replace(target, structured=structured)
    except ValueError as e:  # an unknown point: Target names the valid ones
        raise UsageError(f"--structured: {e}") from None
    rtol, atol = _tolerance(args.rtol, "--rtol"), _tolerance(args.atol, "--atol")
    try:
        api.declared_tolerances(checks or list(CHECKS), rtol=rtol, atol=atol)
    except (UnknownCheck, ValueError) as e:
        raise UsageError(str(e)) from None
    with stops_interrupt():
        report = api.check(
            target,
            checks=checks,
            max_examples=args.max_examples,
            budget=args.budget,
            seed=args.seed,
            corpus=corpus_root(args),
            variants=args.variants,
            shrink_seconds=args.shrink_seconds,
            config=resolve_config(),
            rtol=rtol,
            atol=atol,
        )
    print(report.summary(), end="")
    return 0 if report.ok else 1


def _domain(items: list[str] | None) -> dict:
    """``x=0:`` -> {"x": (0.0, None)}; ``y=-1:1`` -> {"y": (-1.0, 1.0)}."""
    out = {}
    for item in items or []:
        name, sep, interval = item.partition("=")
        low, colon, high = interval.partition(":")
        try:
            if not (sep and colon and name):
                raise ValueError
            out[name] = (float(low) if low else None, float(high) if high else None)
        except ValueError:
            raise UsageError(
                f"--domain {item!r}: expected NAME=LOW:HIGH with either end optional, e.g. x=0: or y=-1:1"
            ) from None
    return out


def _sizes(value: str | None) -> tuple[int, int] | None:
    """``--sizes 1:4`` -> (1, 4)."""
    if value is None:
        return None
    low, sep, high = value.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(low), int(high)
    except ValueError:
        raise UsageError(f"--sizes {value!r}: expected MIN:MAX, e.g. 1:4") from None


def _tolerance(values: list[str] | None, option: str) -> float | dict[str, float] | None:
    """``--rtol 1e-6`` (every check) or ``--rtol grad=1e-6 forward=1e-5``."""
    if not values:
        return None
    try:
        if len(values) == 1 and "=" not in values[0]:
            return float(values[0])
        pairs = [v.split("=", 1) for v in values]
        if any(len(p) != 2 for p in pairs):
            raise ValueError
        return {name: float(number) for name, number in pairs}
    except ValueError:
        raise UsageError(f"{option} {' '.join(values)!r}: expected a number, or CHECK=NUMBER per check") from None
