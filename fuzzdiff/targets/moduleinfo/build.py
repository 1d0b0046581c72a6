"""One ModuleInput of a ModuleInfo, in one mode, as a fuzz target (family ``moduleinfo``).

The target's arguments are the forward's floating inputs that require grad
(``x0``, ``x1``, ...) and every parameter of the module (``weight``,
``weight_ih_l0``, ``layers_0_linear1_weight``: dots become underscores),
with the sample's shapes as a fixed spec; everything else of the forward
call (integer indices and targets, masks, lengths, flags) and the
constructor's arguments stay as in the sample. So layouts (noncontiguous,
offsets, stride 0), aliasing (two parameters of one shape tied, an input
tied to a weight), values, dtype and cotangents of the inputs and the
parameters are fuzzed, while the call stays the one the ModuleInfo's author
wrote. Buffers stay the module's own (fuzzdiff.targets.moduleinfo.call).

Values come from the sample, as OpInfo targets' range mode does: each
argument is drawn from the interval its own values span (a parameter
initialized to a constant, a norm's ones or zeros, from that value +- 0.5),
joined with the intervals of the arguments of its class (in [0, 1],
positive, any), so that they can alias.

A sample is used where its call runs, with finite outputs and gradients, at
the sample and at random points of those intervals, and leaves its inputs
as they were. A module whose two calls under different seeds differ draws
random numbers (dropout in a Transformer in training mode): its target is
``seeded_alike`` (fuzzdiff.targets.randomness), provided two calls under one
seed agree; otherwise the sample is not used.
"""

from __future__ import annotations

import fnmatch
import random
import unittest

import numpy as np
import torch
from torch.utils._pytree import tree_flatten

from fuzzdiff.case import draws
from fuzzdiff.targets.moduleinfo.call import ModuleCall
from fuzzdiff.targets.moduleinfo.known import known_for
from fuzzdiff.targets.moduleinfo.tables import (
    DISTINCT,
    EVAL,
    FAMILY,
    MAX_NUMEL,
    MODULE_TESTS,
    PREFIX,
    RUNNING_STATS,
    SEED,
    SKIP,
)
from fuzzdiff.targets.randomness import seeded_alike
from fuzzdiff.targets.target import Target

__all__ = ["samples", "sample_targets", "build", "skips_for", "target_name", "modes"]

MODULE_TESTS_CLASS = "TestModule"


def modes(info) -> tuple[bool, ...]:
    """The training flags a ModuleInfo's targets are built in: both where they differ."""
    return (True, False) if info.train_and_eval_differ else (True,)


def target_name(info, index: int, training: bool) -> str:
    """``modules/<module>_<index>``, with ``_eval`` for eval mode where the modes differ."""
    return f"{PREFIX}{info.name}_{index}{'' if training else EVAL}"


def samples(info, training: bool) -> list:
    """The ModuleInfo's float64 CPU ModuleInputs in one mode, the same on every call:
    torch's, Python's and NumPy's generators seeded (and restored)."""
    state, np_state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(SEED)
            random.seed(SEED)
            np.random.seed(SEED)
            return list(
                info.module_inputs_func(info, device="cpu", dtype=torch.float64, requires_grad=True, training=training)
            )
    finally:
        random.setstate(state)
        np.random.set_state(np_state)


def _fuzzable(t) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype == torch.float64 and t.requires_grad and t.layout == torch.strided


def _call(info, sample, training: bool) -> tuple[ModuleCall, list[torch.Tensor]] | None:
    """The sample's call and its fuzzed tensors' sample values; None where it has none to fuzz."""
    if sample.forward_input is None:
        return None
    flat, spec = tree_flatten((sample.forward_input.args, sample.forward_input.kwargs))
    tensors = [t for t in flat if isinstance(t, torch.Tensor)]
    if any(t.layout != torch.strided or t.device.type != "cpu" for t in tensors):
        return None
    positions = tuple(k for k, t in enumerate(flat) if _fuzzable(t))
    leaves = [t.detach() if isinstance(t, torch.Tensor) else t for t in flat]
    constructor = sample.constructor_input
    try:
        probe = ModuleCall(info.module_cls, constructor.args, constructor.kwargs, training, spec, leaves, positions, ())
        module = probe.module(torch.float64, torch.device("cpu"))
    except Exception:  # noqa: BLE001 - a constructor that fails in float64 gives no target
        return None
    named = [(n, p.detach()) for n, p in module.named_parameters()]
    call = ModuleCall(
        info.module_cls, constructor.args, constructor.kwargs, training, spec, leaves, positions, [n for n, _ in named]
    )
    values = [flat[k].detach() for k in positions] + [p for _, p in named]
    if not values or sum(t.numel() for t in values) > MAX_NUMEL or not all(torch.isfinite(t).all() for t in values):
        return None
    return call, values


def _floating(out) -> list[torch.Tensor]:
    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _valid_at(call: ModuleCall, points: list[torch.Tensor]) -> bool:
    """The call runs, leaves its inputs alone, and its outputs and gradients are finite, at ``points``."""
    xs = [p.detach().clone().requires_grad_() for p in points]
    try:
        outs = _floating(call(*xs))
        if not outs or not all(torch.isfinite(o).all() for o in outs):
            return False
        if any(not torch.equal(x, p) for x, p in zip(xs, points)):
            return False  # an in-place module (ReLU(inplace=True)) writes its input
        total = sum(o.sum() for o in outs if o.requires_grad)
        if not isinstance(total, torch.Tensor):
            return False  # no output depends differentiably on the fuzzed tensors
        grads = torch.autograd.grad(total, xs, allow_unused=True)
        return all(torch.isfinite(g).all() for g in grads if g is not None)
    except Exception:  # noqa: BLE001 - any error means the points are not valid inputs
        return False


def _outputs_under(call: ModuleCall, values: list[torch.Tensor], seed: int) -> list[torch.Tensor]:
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        return _floating(call(*values))


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def _interval_class(lo: float, hi: float) -> str:
    return "unit" if 0.0 <= lo and hi <= 1.0 else "positive" if lo > 0.0 else "any"


def _intervals(values: list[torch.Tensor]) -> list[tuple[float, float]]:
    """Per argument, its class's union of the arguments' own ranges (a constant c widened to c +- 0.5)."""
    own = []
    for t in values:
        lo, hi = (t.min().item(), t.max().item()) if t.numel() else (-1.0, 1.0)
        if hi - lo < 1e-12:
            lo, hi = lo - 0.5, hi + 0.5
        own.append((lo, hi))
    union: dict[str, tuple[float, float]] = {}
    for lo, hi in own:
        a, b = union.get(_interval_class(lo, hi), (lo, hi))
        union[_interval_class(lo, hi)] = (min(a, lo), max(b, hi))
    return [union[_interval_class(lo, hi)] for lo, hi in own]


def _random_points(intervals, values, seed: int) -> list[torch.Tensor]:
    points, start = [], 0
    for (lo, hi), t in zip(intervals, values):
        z = draws.words(seed, t.numel(), draws.POINTS, start)
        points.append(torch.from_numpy(draws.uniform(z, lo, hi)).reshape(t.shape))
        start += t.numel()
    return points


def _is_skip(decorator) -> bool:
    """unittest.skip(...) and unittest.expectedFailure, as fuzzdiff.targets.opinfo.skips reads them."""
    return decorator is unittest.expectedFailure or getattr(decorator, "__qualname__", "").startswith("skip.")


def _skipped(info, checks: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """Check -> the module test that the ModuleInfo skips or expects to fail (float64, CPU)."""
    out = {}
    for check, tests in checks.items():
        for d in info.decorators:
            if not hasattr(d, "is_active") or not any(_is_skip(x) for x in d.decorators):
                continue
            hit = next((t for t in tests if d.is_active(MODULE_TESTS_CLASS, t, "cpu", torch.float64, {})), None)
            if hit is not None:
                out[check] = f"ModuleInfo skips or expects failure of {MODULE_TESTS_CLASS}.{hit} (float64, cpu)"
                break
    return out


def _tracks_running_stats(call: ModuleCall) -> bool:
    module = call.module(torch.float64, torch.device("cpu"))
    return any(name.endswith("running_mean") for name, _ in module.named_buffers())


def skips_for(info) -> dict[str, str]:
    """Check -> why it does not apply to the ModuleInfo's targets."""
    skip = dict(SKIP)
    if not info.supports_gradgrad:
        skip["gradgrad"] = skip["forward2"] = "ModuleInfo supports_gradgrad=False"
    return {**skip, **_skipped(info, MODULE_TESTS)}


def _arg_name(parameter: str) -> str:
    """A parameter's name as a spec argument: dots become underscores, and a
    leading digit (a Sequential's ``0.weight``) gets a ``p``."""
    name = parameter.replace(".", "_")
    return f"p{name}" if name[0].isdigit() else name


def build(info, index: int, sample, training: bool) -> Target | None:
    """The target of one ModuleInput in one mode (None: the sample is not usable)."""
    made = _call(info, sample, training)
    if made is None:
        return None
    call, values = made
    if not _valid_at(call, values):
        return None
    intervals = _intervals(values)
    if not all(_valid_at(call, _random_points(intervals, values, s)) for s in (1, 2)):
        return None
    is_random = not _same(_outputs_under(call, values, 1), _outputs_under(call, values, 2))
    if is_random and not _same(_outputs_under(call, values, 1), _outputs_under(call, values, 1)):
        return None  # random, and not even a function of the seed
    inputs = [f"x{i}" for i in range(len(call.positions))]
    names = inputs + [_arg_name(n) for n in call.parameters]
    float32 = torch.float32 in info.dtypes
    target = Target(
        target_name(info, index, training),
        call,
        ", ".join(f"{n}: {' '.join(map(str, t.shape))}".rstrip() for n, t in zip(names, values)),
        FAMILY,
        sample=dict(zip(names, intervals)),
        dtypes=(torch.float64, torch.float32) if float32 else (torch.float64,),
        distinct=any(fnmatch.fnmatchcase(info.name, p) for p in DISTINCT),
        skip={
            **skips_for(info),
            **({} if float32 else {"dtype": "float32 is not among the ModuleInfo's dtypes"}),
            **({"vmap": RUNNING_STATS} if training and _tracks_running_stats(call) else {}),
        },
        known=known_for(info.name, training),
        op=f"{info.module_cls.__module__.split('.modules')[0]}.{info.module_cls.__name__}",
    )
    return seeded_alike(target) if is_random else target


def sample_targets(info, training: bool) -> tuple[Target, ...]:
    """The targets of a ModuleInfo's first and last usable samples in one mode
    (usually the plainest call and one with the most options)."""
    all_samples = samples(info, training)
    first = next(((k, t) for k, s in enumerate(all_samples) if (t := build(info, k, s, training))), None)
    if first is None:
        return ()
    later = range(len(all_samples) - 1, first[0], -1)
    last = next((t for k in later if (t := build(info, k, all_samples[k], training))), None)
    return (first[1],) if last is None else (first[1], last)
