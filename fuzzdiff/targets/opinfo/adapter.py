"""PyTorch's OpInfo database as fuzz targets (family ``opinfo``): all, some, one.

Each autograd-capable OpInfo (one per ``(name, variant_test_name)``) gives up
to ``SAMPLES_PER_OP`` targets, one per chosen ``SampleInput``
(fuzzdiff.targets.opinfo.build), and one per number of such a sample that the
op also takes as a 0-dim tensor, with the skips its flags and fuzzdiff's tables
give (fuzzdiff.targets.opinfo.skips, fuzzdiff.targets.opinfo.tables).

Targets are built lazily: importing ``op_db`` takes seconds, and each op's
``sample_inputs`` tens of milliseconds. ``opinfo_targets()`` builds them
all; ``get_opinfo_target("opinfo/add@3")`` builds one op's. A target's name
names the op and the sample index, and samples are drawn under a fixed seed
(``samples``), so a case replays from JSON without Hypothesis on the torch it
was found with. Sample lists change between releases, so a corpus record also
stores the call (``stored_sample``, fuzzdiff.targets.stored_sample), and
``get_opinfo_target(ref, stored)`` rebuilds the same target from it under
any torch. A target of a sample's number passed as a tensor
(``opinfo/lerp@0_t0``, fuzzdiff.targets.opinfo.build.scalar_targets) is
named by its index only: its call is no sample's.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import re
from collections.abc import Callable, Iterable

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from fuzzdiff.targets.opinfo.build import SampleCall, build, fuzzable, sample_targets, samples
from fuzzdiff.targets.opinfo.call import is_identity, unchanged, unwrapped_output
from fuzzdiff.targets.opinfo.skips import declined, excluded, float32_skip, skips_for
from fuzzdiff.targets.opinfo.tables import (
    DTYPE_SKIP,
    EXCLUDED,
    FAMILY,
    NEAR,
    PREFIX,
    SAMPLES_PER_OP,
    op_key,
)
from fuzzdiff.targets.stored_sample import Fuzzed, SampleError, StoredSample, near_value, same_value
from fuzzdiff.targets.target import Target, TargetUnavailable

# The family's face: besides its own, the names of its tables, skips and samples that callers import from here.
__all__ = [
    "PREFIX",
    "FAMILY",
    "SAMPLES_PER_OP",
    "NEAR",
    "EXCLUDED",
    "DTYPE_SKIP",
    "op_db",
    "op_key",
    "opinfo_ops",
    "op_targets",
    "opinfo_targets",
    "get_opinfo_target",
    "stored_sample",
    "unwrapped_output",
    "is_identity",
    "select",
    "skips_for",
    "declined",
    "float32_skip",
    "samples",
    "OpInfoError",
]


_INDEX = re.compile(r"\d+(_t\d+)?")  # a target's sample index, and its number passed as a tensor


class OpInfoError(TargetUnavailable):
    """An OpInfo target that this torch's op_db cannot give."""


@functools.lru_cache(maxsize=1)
def op_db() -> tuple:
    """torch's OpInfo database (imports ``expecttest``; seconds, once)."""
    try:
        # optional dependency (expecttest), and seconds of startup: imported on first use
        from torch.testing._internal.common_methods_invocations import op_db as db
    except ImportError as e:  # expecttest missing: the optional extra ``opinfo``
        raise OpInfoError(f"the OpInfo database needs expecttest (pip install fuzzdiff[opinfo]): {e}") from None
    return tuple(db)


@functools.lru_cache(maxsize=1)
def _ops() -> dict:
    return {op_key(op): op for op in op_db()}


def opinfo_ops() -> list:
    """The OpInfos that yield targets, in op_db's order (cheap once op_db is loaded)."""
    return [op for op in op_db() if excluded(op) is None]


@functools.cache
def _op_targets(key: str) -> tuple[Target, ...]:
    return sample_targets(_ops()[key])


def op_targets(op) -> list[Target]:
    """The targets of one OpInfo (built on first use, then cached)."""
    return list(_op_targets(op_key(op)))


def opinfo_targets(ops: Iterable | None = None) -> list[Target]:
    """Targets of ``ops`` (default: every OpInfo that yields targets), sorted by name."""
    ops = opinfo_ops() if ops is None else ops
    return sorted((t for op in ops for t in op_targets(op)), key=lambda t: t.name)


def select(patterns: Iterable[str]) -> list[Target]:
    """OpInfo targets whose ``name`` or ``family/name`` (``opinfo/add@0``) matches a
    glob; builds only the ops a pattern can match (``fuzzdiff run --targets``)."""
    pats = list(patterns)
    keys = [p.removeprefix(PREFIX).rsplit("@", 1)[0] for p in pats]
    ops = [op for op in opinfo_ops() if any(fnmatch.fnmatchcase(op_key(op), k) for k in keys)]
    return [
        t
        for t in opinfo_targets(ops)
        if any(fnmatch.fnmatchcase(t.name, p) or fnmatch.fnmatchcase(t.ref, p) for p in pats)
    ]


def get_opinfo_target(ref: str, stored: StoredSample | None = None) -> Target:
    """The target a case names, ``opinfo/<op key>@<sample index>``; builds only that op.

    With ``stored`` (a record's ``opinfo_sample``) the call is the stored one,
    whichever sample of this torch's list it is now (see ``stored_sample``)."""
    key, sep, index = ref.removeprefix(PREFIX).rpartition("@")
    named = bool(sep and _INDEX.fullmatch(index))
    op = _ops().get(key) if named else None
    if op is None and stored is not None and named:
        raise OpInfoError(f"torch {torch.__version__}'s op_db has no OpInfo {key!r} to rebuild {ref} from")
    if op is None:
        raise OpInfoError(
            f"unknown OpInfo target {ref!r}: expected opinfo/<op>[.<variant>]@<sample index>[_t<number>] "
            "of an op in torch's op_db"
        )
    why = excluded(op)
    if stored is not None:
        if why is not None:
            raise OpInfoError(f"OpInfo {key!r} yields no targets on torch {torch.__version__} ({why})")
        if not index.isdigit():
            raise OpInfoError(f"{ref}: a sample's number as a tensor is named by its index only, never stored")
        return _stored_target(ref, json.dumps(stored.to_json(), sort_keys=True))
    found = next((t for t in op_targets(op) if t.name == f"{key}@{index}"), None) if why is None else None
    if found is None:
        raise OpInfoError(
            f"OpInfo {key!r} has no target for sample {index}"
            + (f" ({why})" if why else f"; its targets: {[t.name for t in op_targets(op)]}")
        )
    return found


# -- a record's stored sample ----------------------------------------------------------------


def stored_sample(target: Target) -> StoredSample:
    """What a corpus record stores of an OpInfo target to rebuild it under any
    torch (fuzzdiff.targets.stored_sample); SampleError when its call holds a
    value a record cannot store (the record then names its target by index only)."""
    call = target.fn
    if not isinstance(call, SampleCall):
        raise SampleError("", f"target {target.name!r} is not an OpInfo sample's call")
    if call.scalar is not None:  # its number, now a tensor, is the sample's no more
        raise SampleError("", f"target {target.name!r} passes one of its sample's numbers as a tensor")
    output_fn, keep = unwrapped_output(call.output_fn)
    marked = list(call.leaves)
    for i, pos in enumerate(call.positions):
        marked[pos] = Fuzzed(i)
    stored = StoredSample(
        op=call.op.name,
        variant=call.op.variant_test_name,
        index=call.index,
        call=tree_unflatten(marked, call.spec),
        fuzzed=tuple(call.values),
        near=any(s is not None for s in call.near),
        output="identity" if is_identity(output_fn) else "processed",
        keep=keep,
    )
    stored.to_json()  # every value in it can be stored
    return stored


@functools.lru_cache(maxsize=64)
def _stored_target(ref: str, text: str) -> Target:
    """``get_opinfo_target(ref, stored)``, ``stored`` as canonical JSON (the cache's key)."""
    stored = StoredSample.from_json(json.loads(text))
    key, _, index = ref.removeprefix(PREFIX).rpartition("@")
    if stored.key != key:
        raise OpInfoError(f"{ref}: its stored sample is a call of OpInfo {stored.key!r}, not {key!r}")
    op = _ops()[key]
    marked, spec = tree_flatten(stored.call)
    positions = tuple(k for k, leaf in enumerate(marked) if isinstance(leaf, Fuzzed))
    flat = [stored.fuzzed[leaf.index] if isinstance(leaf, Fuzzed) else leaf for leaf in marked]
    output_fn = unchanged if stored.output == "identity" else _processing(op, stored)
    target = build(op, int(index), spec, flat, positions, output_fn, stored)
    if target is None:
        raise OpInfoError(
            f"{ref}: its stored call is not a valid one on torch {torch.__version__}: at the sample it raises, "
            "or its outputs or gradients are not finite, or two runs differ"
        )
    return target


def _processing(op, stored: StoredSample) -> Callable:
    """The ``output_process_fn_grad`` of this torch's sample with the stored call's
    arguments (the stored index is tried first): code, so it is never stored."""
    all_samples = samples(op)
    order = sorted(range(len(all_samples)), key=lambda k: k != stored.index)
    for k in order:
        if _same_call(all_samples[k], stored):
            return all_samples[k].output_process_fn_grad
    raise OpInfoError(
        f"OpInfo {stored.key!r}: the stored sample's outputs are processed by the sample's own "
        f"output_process_fn_grad, and none of the {len(all_samples)} samples on torch {torch.__version__} "
        "has the stored arguments to take it from"
    )


def _same_call(sample, stored: StoredSample) -> bool:
    flat, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    marked, stored_spec = tree_flatten(stored.call)
    if spec != stored_spec:
        return False
    return all(
        fuzzable(a) and near_value(a, stored.fuzzed[b.index]) if isinstance(b, Fuzzed) else same_value(a, b)
        for a, b in zip(flat, marked)
    )
