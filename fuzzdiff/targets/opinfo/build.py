"""One OpInfo sample as a fuzz target (family ``opinfo``).

Each chosen ``SampleInput`` of an OpInfo gives a target: its floating tensors
that require grad become the case's arguments, with the sample's shapes as a
fixed spec (``"a0: 5 5, a1: 5"``); everything else (integer index tensors,
masks, scalars, dims, flags) stays exactly as in the sample. So layouts
(noncontiguous, offsets, stride 0, channels_last), aliasing, values, dtype and
cotangents are fuzzed while the call stays the valid one the OpInfo's author
wrote. The call is a ``SampleCall`` (fuzzdiff.targets.opinfo.call).

Values. An OpInfo states a domain only for unary ufuncs, so values come from
the sample itself:

- ``range`` (the default): each argument's values are drawn from the
  interval its own sample values span (intersected with ``op.domain`` with a
  margin, for unary ufuncs). The sign, a [0, 1] probability, a positive scale
  survive; arguments of one class share an interval, so they can alias.
- ``near``: each argument is ``sample + x`` with ``x`` within 1e-3 of the
  sample's scale. For ops whose samples carry structure a random point lacks
  (positive definite, well conditioned, sorted, ...): the ``NEAR`` table
  names them with the reason, and any op that raises or gives non-finite
  results or gradients at a random point of its ranges is moved here
  automatically when its target is built. ``x + s`` keeps ``x``'s dim order,
  so a permuted or channels_last ``x`` still reaches the op as such; offsets,
  slices, stride 0 and aliasing do not (the ``alias`` check is skipped).

Numbers as tensors. A Python number of the sample (a fill value, a weight, a
quantile, a margin) that the op also takes as a tensor gives a target of its
own, ``<op>@<index>_t<j>`` (the sample's number ``j``, in pytree order): the
number becomes a 0-dim tensor argument ``s``, so vmap batches it and the
checks differentiate in it, where the number version reaches neither. The op
takes it as a tensor if the call with ``torch.tensor(number)`` runs and gives
the number version's outputs, and autograd reaches the tensor (else it was read
as a Python number, ``.item()``); where its derivative is not implemented it is
a ``NoGrad`` argument. ``s`` is drawn within ``SCALAR_SCALE * |number|`` of
the number, whatever the mode of the other arguments (its sign and magnitude
stay), and reaches the op as drawn; the number may be special (an integer
exponent), so the target is kept only if it is valid at random such points.
Up to ``SCALARS_PER_SAMPLE`` numbers per sample, but for the ops
``SCALAR_EXCLUDED`` names.

Samples are drawn under a fixed seed (``samples``), so a target names its call
by the op and the sample's index on the torch it was built with.
"""

from __future__ import annotations

import functools
import math
import random
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from fuzzdiff.case import draws
from fuzzdiff.targets.opinfo.call import Differentiable, OpInfoCall
from fuzzdiff.targets.opinfo.known import known_for
from fuzzdiff.targets.opinfo.skips import Declines, float32_skip, skips_for
from fuzzdiff.targets.opinfo.tables import (
    CONSTANTS,
    CONTRACTS,
    DISTINCT,
    FAMILY,
    MAX_NUMEL,
    NEAR,
    NEAR_SCALE,
    NEAR_TOL,
    PREFIX,
    SAMPLES_PER_OP,
    SCALAR_EXCLUDED,
    SCALAR_SCALE,
    SCALARS_PER_SAMPLE,
    SEED,
    listed,
    match,
    op_key,
)
from fuzzdiff.targets.stored_sample import StoredSample
from fuzzdiff.targets.target import NoGrad, Target
from strategies.values import sampling_interval

__all__ = [
    "SampleCall",
    "samples",
    "fuzzable",
    "sample_targets",
    "build",
    "scalar_targets",
    "differentiable_outputs",
    "INVALID_AT_RANDOM",
]


def samples(op) -> list:
    """The op's float64 CPU samples, the same on every call: sample_inputs draw from
    torch's, Python's and NumPy's generators, so all three are seeded (and restored).

    The samples are those of ``op.sample_inputs`` outside a unittest test:
    its iterator seeds the three with torch's test seed before each sample.
    Drawn here without that iterator, which looks for the calling test by
    inspecting the whole stack for each op, and seeds CUDA's generators too,
    each seed queueing a stack trace while CUDA is not initialized: under
    pytest-xdist those two cost minutes for op_db's 14,000 samples."""
    # imported with op_db, never before it: importing it loads a Hypothesis profile of torch's own
    from torch.testing._internal.common_utils import SEED as TORCH_TEST_SEED

    state, np_state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            _seed(SEED)
            produced = iter(op.sample_inputs_func(op, "cpu", torch.float64, True))
            drawn: list[Any] = []
            while True:
                _seed(TORCH_TEST_SEED)
                sample = next(produced, None)
                if sample is None:
                    return drawn
                drawn.append(sample)
    finally:
        random.setstate(state)
        np.random.set_state(np_state)


def _seed(seed: int) -> None:
    """The CPU generators sample_inputs draw from, seeded."""
    torch.default_generator.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def fuzzable(t: Any) -> bool:
    return (
        isinstance(t, torch.Tensor)
        and t.dtype == torch.float64
        and t.requires_grad
        and t.layout == torch.strided
        and not t.is_conj()
        and not t.is_neg()
    )


def _usable(sample) -> bool:
    leaves, _ = tree_flatten((sample.input, sample.args, sample.kwargs))
    tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
    fuzzed = [t for t in tensors if fuzzable(t)]
    return (
        bool(fuzzed)
        and all(t.layout == torch.strided and t.device.type == "cpu" for t in tensors)
        and sum(t.numel() for t in fuzzed) <= MAX_NUMEL
        and all(torch.isfinite(t).all() for t in fuzzed)
    )  # -inf masks are values we cannot draw


class SampleCall(OpInfoCall):
    """The ``OpInfoCall`` of an OpInfo target: the op as OpInfo's tests call it
    (through its ``gradcheck_wrapper``), with what a record stores besides
    (``stored_sample``): the OpInfo, the sample's own values of the fuzzed
    arguments (``values``) and the sample's index. ``near[i]`` is None in range
    mode, else the sample tensor that argument ``i`` perturbs; ``scalar``, the
    argument that is one of the sample's numbers (``scalar_targets``)."""

    def __init__(self, op, spec, leaves, positions, near, output_fn, values=(), index=-1, scalar=None):
        super().__init__(functools.partial(op.gradcheck_wrapper, op.op), spec, leaves, positions, near, output_fn)
        self.op = op
        self.values = tuple(values)
        self.index = index
        self.scalar = scalar  # which fuzzed argument is a sample's number as a 0-dim tensor (None: none)


def _interval_class(lo: float, hi: float) -> str:
    return "unit" if 0.0 <= lo and hi <= 1.0 else "positive" if lo > 0.0 else "any"


def _range_intervals(op, fuzzed: list[torch.Tensor]) -> list[tuple[float, float]]:
    """Per argument, the interval its values are drawn from: its class's union of
    the sample's own ranges (so arguments of one class can alias), inside
    ``op.domain`` with a margin for unary ufuncs."""
    own = [(t.min().item(), t.max().item()) if t.numel() else (-1.0, 1.0) for t in fuzzed]
    union: dict[str, tuple[float, float]] = {}
    for lo, hi in own:
        c = _interval_class(lo, hi)
        a, b = union.get(c, (lo, hi))
        union[c] = (min(a, lo), max(b, hi))
    domain = getattr(op, "domain", None)
    out = []
    for lo, hi in own:
        lo, hi = union[_interval_class(lo, hi)]
        if domain is not None:
            dlo, dhi = sampling_interval(tuple(domain))
            if domain[0] is not None:
                lo = max(lo, dlo)
            if domain[1] is not None:
                hi = min(hi, dhi)
        out.append((float(lo), float(max(lo, hi))))
    return out


def _finite(value) -> bool:
    leaves, _ = tree_flatten(value)
    return all(torch.isfinite(t).all().item() for t in leaves if isinstance(t, torch.Tensor) and t.is_floating_point())


def _valid_at(call: SampleCall, points: list[torch.Tensor], grads: tuple[bool, ...] | None = None) -> bool:
    """The call runs, and its outputs and gradients are finite, at ``points``
    (``grads[i]``: whether point ``i`` is differentiated; default all)."""
    xs = [p.detach().requires_grad_(grads is None or g) for p, g in zip(points, grads or [True] * len(points))]
    try:
        out = call(*xs)
        outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor) and o.requires_grad]
        if not _finite(out):
            return False
        if outs:
            total = sum((torch.view_as_real(o) if o.is_complex() else o).sum() for o in outs)
            assert isinstance(total, torch.Tensor)  # a sum of one or more tensors
            wrt = [x for x in xs if x.requires_grad]
            return _finite([g for g in torch.autograd.grad(total, wrt, allow_unused=True) if g is not None])
        return True
    except Exception:  # noqa: BLE001 - any error means the points are not valid inputs
        return False


def differentiable_outputs(call: SampleCall, fuzzed: list[torch.Tensor]) -> tuple[bool, ...] | None:
    """Which output leaves to keep (see ``Differentiable``): every one but the
    floating leaves that do not require grad while another does. None: all."""
    xs = [p.detach().requires_grad_() for p in fuzzed]
    outs = tree_flatten(call(*xs))[0]
    floating = [isinstance(o, torch.Tensor) and (o.is_floating_point() or o.is_complex()) for o in outs]
    if not any(f and o.requires_grad for f, o in zip(floating, outs)):
        return None  # no output requires grad (e.g. zeros_like): nothing to tell apart
    keep = tuple(not f or o.requires_grad for f, o in zip(floating, outs))
    return None if all(keep) else keep


def _random_points(intervals, fuzzed, seed: int) -> list[torch.Tensor]:
    """Uniform points of the intervals, one stream of fuzzdiff.case.draws for all
    arguments: the same target under every torch that gives the same samples."""
    points, start = [], 0
    for (lo, hi), t in zip(intervals, fuzzed):
        z = draws.words(seed, t.numel(), draws.POINTS, start)
        points.append(torch.from_numpy(draws.uniform(z, lo, hi)).reshape(t.shape))
        start += t.numel()
    return points


def _deterministic(call: SampleCall, fuzzed) -> bool:
    """Two runs at the sample, under different global seeds, agree bit for bit."""
    outs = []
    for seed in (1, 2):
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed)
            outs.append(tree_flatten(call(*fuzzed))[0])
    return all(not isinstance(a, torch.Tensor) or _same(a, b) for a, b in zip(*outs))


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit, NaN equal to NaN, any dtype (complex half included)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_complex():
        a, b = torch.view_as_real(a.to(torch.complex128)), torch.view_as_real(b.to(torch.complex128))
    if a.is_floating_point():
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return torch.equal(a, b)


def _chosen(usable: list[int]) -> list[int]:
    """The first and the last usable sample: usually the plainest call and one
    with the most options (broadcasting, keyword arguments)."""
    return sorted({usable[0], usable[-1]})[:SAMPLES_PER_OP] if usable else []


INVALID_AT_RANDOM = "invalid (error or non-finite) at random points of the sample's ranges"


def _target(op, index: int, sample) -> Target | None:
    flat, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    positions = tuple(k for k, t in enumerate(flat) if fuzzable(t))
    return build(op, index, spec, flat, positions, sample.output_process_fn_grad)


def build(
    op,
    index: int,
    spec,
    flat: list,
    positions: tuple[int, ...],
    output_fn: Callable,
    stored: StoredSample | None = None,
    scalar: Scalar | None = None,
) -> Target | None:
    """The target of one sample's call (None: the call is not valid at the sample).

    With ``stored`` (a record's sample), whether the arguments perturb the
    sample (near mode) and which outputs are kept are the record's: they give
    its stored values their meaning. Everything else is found as for any sample.
    With ``scalar``, ``flat`` holds one of the sample's numbers as a 0-dim
    tensor (``scalar_targets``); None also where it is invalid near the number.
    """
    key = op_key(op)
    fuzzed = [flat[k].detach() for k in positions]
    leaves = tuple(
        None if k in positions else t.detach() if isinstance(t, torch.Tensor) else t for k, t in enumerate(flat)
    )
    constants = any(isinstance(t, torch.Tensor) for t in leaves)
    values = tuple(fuzzed)
    at = None if scalar is None else positions.index(scalar.position)
    grads = tuple(i != at or scalar is None or scalar.differentiable for i in range(len(fuzzed)))

    def make(output_fn: Callable, near: tuple) -> SampleCall:
        # the number reaches the op as drawn in either mode: its interval is around it
        near = tuple(None if i == at else n for i, n in enumerate(near))
        return SampleCall(op, spec, leaves, positions, near, output_fn, values, index, at)

    def with_scalar(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
        if at is None:
            return intervals
        number = values[at].item()
        d = SCALAR_SCALE * (abs(number) or 1.0)
        return [*intervals[:at], (number - d, number + d), *intervals[at:]]

    def valid_around(call: SampleCall, intervals: list[tuple[float, float]]) -> bool:
        return all(_valid_at(call, _random_points(intervals, fuzzed, s), grads) for s in (1, 2))

    call = make(output_fn, (None,) * len(positions))
    if not _valid_at(call, fuzzed, grads) or not _deterministic(call, fuzzed):
        return None
    keep = differentiable_outputs(call, fuzzed) if stored is None else stored.keep
    if keep is not None:
        output_fn = Differentiable(output_fn, keep)
        call = make(output_fn, (None,) * len(positions))
    near = match(key, NEAR)
    tensors = [t for i, t in enumerate(fuzzed) if i != at]  # the number's own range joins no class
    intervals = with_scalar(_range_intervals(op, tensors))
    if stored is not None:
        near = (near or INVALID_AT_RANDOM) if stored.near else None
    elif near is None and not valid_around(call, intervals):
        near = INVALID_AT_RANDOM
    if near is not None:
        call = make(output_fn, values)
        intervals = with_scalar(
            [(-d, d) for d in (NEAR_SCALE * max(1.0, t.abs().max().item() if t.numel() else 1.0) for t in tensors)]
        )
        if at is not None and not valid_around(call, intervals):
            return None
    with torch.no_grad():
        complex_out = any(isinstance(o, torch.Tensor) and o.is_complex() for o in tree_flatten(call(*fuzzed))[0])
    names = _names(len(fuzzed), at)
    no32 = float32_skip(op, near is not None, intervals)
    refused, contract_checks = CONTRACTS.get(key, ((), ()))
    name = f"{key}@{index}" + ("" if scalar is None else f"_t{_numbers(flat[: scalar.position])}")
    return Target(
        name,
        call,
        ", ".join(f"{n}: {' '.join(map(str, t.shape))}".rstrip() for n, t in zip(names, fuzzed)),
        FAMILY,
        sample=dict(zip(names, intervals)),
        dtypes=(torch.float64,) if no32 else (torch.float64, torch.float32),
        kinds={} if scalar is None or scalar.differentiable else {SCALAR: NoGrad()},
        distinct=listed(key, DISTINCT),
        tolerances={c: NEAR_TOL for c in ("grad", "forward", "gradgrad", "layout", "alias", "vmap")} if near else {},
        skip={
            check: why
            for check, why in {
                **skips_for(op, near is not None, complex_out),
                **(CONSTANTS if constants else {}),
                **({"dtype": no32} if no32 else {}),
            }.items()
            if check not in contract_checks
        },
        known=known_for(PREFIX + name),
        origin=PREFIX + name,
        invalid=refused,
        decline=Declines(op, contract_checks),
        op=function_name(op),
    )


def function_name(op) -> str:
    """The torch function an OpInfo calls, by name: ``torch.nn.functional.huber_loss``,
    ``torch.Tensor.contiguous`` for a method torch's overrides do not list."""
    found = torch.overrides.resolve_name(op.op)
    if found is not None:
        return found
    return f"torch.Tensor.{op.name}" if hasattr(torch.Tensor, op.name) else f"torch.{op.name}"


def _names(count: int, scalar: int | None) -> list[str]:
    """The fuzzed arguments' names: ``a0``, ``a1``, ... for the sample's tensors, ``s`` for its number."""
    tensors = iter(range(count))
    return [SCALAR if i == scalar else f"a{next(tensors)}" for i in range(count)]


# -- the sample's numbers as tensors ---------------------------------------------------------

SCALAR = "s"  # the name of the argument that is one of the sample's numbers


class Scalar(NamedTuple):
    """One of a sample's numbers, passed as a 0-dim tensor: where it is in the
    flattened call, and whether the op differentiates in it."""

    position: int
    differentiable: bool


def _is_number(leaf: Any) -> bool:
    return type(leaf) in (int, float) and math.isfinite(leaf)


def _numbers(leaves: list) -> int:
    return sum(_is_number(leaf) for leaf in leaves)


def _agree(want: list, got: list) -> bool:
    """The outputs are the same but for rounding (a tensor operand may take another kernel)."""
    if len(want) != len(got):
        return False
    for a, b in zip(want, got):
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
            if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) or a != b:
                return False
        elif a.shape != b.shape or a.dtype != b.dtype:
            return False
        elif a.is_floating_point() or a.is_complex():
            scale = a.detach().abs().nan_to_num(posinf=0.0).max().item() if a.numel() else 0.0
            if not torch.allclose(a.detach(), b.detach(), rtol=1e-12, atol=1e-12 * max(1.0, scale), equal_nan=True):
                return False
        elif not torch.equal(a, b):
            return False
    return True


def _as_tensor(op, spec, flat: list, position: int) -> Scalar | None:
    """How the op takes the sample's number at ``position`` as a 0-dim tensor; None
    where it does not: the call raises, gives other outputs, or reads the tensor
    as a Python number (autograd does not reach it: ``.item()``, ``int()``)."""
    function = functools.partial(op.gradcheck_wrapper, op.op)

    def call(leaves: list) -> list:
        # the sample's tensors copied: some ops update them in place (batch_norm's running stats)
        fresh = [
            t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) and k != position else t
            for k, t in enumerate(leaves)
        ]
        inp, args, kwargs = tree_unflatten(fresh, spec)
        return tree_flatten(function(inp, *args, **kwargs))[0]

    as_tensor = list(flat)
    s = as_tensor[position] = torch.tensor(float(flat[position]), dtype=torch.float64, requires_grad=True)
    try:
        with warnings.catch_warnings():  # an op that reads the tensor as a number says so
            warnings.simplefilter("ignore")
            with torch.no_grad():
                want = call(flat)
            got = call(as_tensor)
    except Exception:  # noqa: BLE001 - any error means the op does not take a tensor there
        return None
    outs = [o for o in got if isinstance(o, torch.Tensor) and o.requires_grad]
    if not _agree(want, got) or not outs:
        return None
    total = sum((torch.view_as_real(o) if o.is_complex() else o).sum() for o in outs)
    assert isinstance(total, torch.Tensor)  # a sum of one or more tensors
    try:
        (grad,) = torch.autograd.grad(total, s, allow_unused=True)
    except RuntimeError:  # its derivative is not implemented (NotImplementedError is one)
        return Scalar(position, False)
    return None if grad is None else Scalar(position, True)


def scalar_targets(op, index: int, sample) -> tuple[Target, ...]:
    """The targets of a sample's numbers that the op also takes as 0-dim tensors,
    each with that one number as a fuzzed argument ``s``: up to
    ``SCALARS_PER_SAMPLE``, none for the ops ``SCALAR_EXCLUDED`` names."""
    if match(op_key(op), SCALAR_EXCLUDED) is not None:
        return ()
    flat, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    out: list[Target] = []
    for position in (k for k, leaf in enumerate(flat) if _is_number(leaf)):
        scalar = _as_tensor(op, spec, flat, position)
        if scalar is None:
            continue
        as_tensor = list(flat)
        as_tensor[position] = torch.tensor(float(flat[position]), dtype=torch.float64, requires_grad=True)
        positions = tuple(k for k, t in enumerate(as_tensor) if k == position or fuzzable(t))
        target = build(op, index, spec, as_tensor, positions, sample.output_process_fn_grad, scalar=scalar)
        if target is not None:
            out.append(target)
        if len(out) == SCALARS_PER_SAMPLE:
            break
    return tuple(out)


def sample_targets(op) -> tuple[Target, ...]:
    """The targets of an OpInfo's chosen samples (``_chosen``), each where its call
    is valid, and of their numbers the op also takes as tensors (``scalar_targets``)."""
    all_samples = samples(op)
    usable = [k for k, s in enumerate(all_samples) if _usable(s)]
    out = []
    for k in _chosen(usable):
        t = _target(op, k, all_samples[k])
        if t is not None:
            out += [t, *scalar_targets(op, k, all_samples[k])]
    return tuple(out)
