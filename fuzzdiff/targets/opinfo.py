"""PyTorch's OpInfo database as fuzz targets (family ``opinfo``).

Each autograd-capable OpInfo (one per ``(name, variant_test_name)``) gives up
to ``SAMPLES_PER_OP`` targets, one per chosen ``SampleInput``: its floating
tensors that require grad become the case's arguments, with the sample's
shapes as a fixed spec (``"a0: 5 5, a1: 5"``); everything else (integer
index tensors, masks, scalars, dims, flags) stays exactly as in the sample.
So layouts (noncontiguous, offsets, stride 0, channels_last), aliasing,
values, dtype and cotangents are fuzzed while the call stays the valid one
the OpInfo's author wrote.

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

Targets are built lazily: importing ``op_db`` takes seconds, and each op's
``sample_inputs`` tens of milliseconds. ``opinfo_targets()`` builds them
all; ``get_opinfo_target("opinfo/add@3")`` builds one op's. A target's name
names the op and the sample index, and samples are drawn under a fixed seed
(``samples``), so a case replays from JSON without Hypothesis on the torch it
was found with. Sample lists change between releases, so a corpus record also
stores the call (``stored_sample``, fuzzdiff.targets.opinfo_sample), and
``get_opinfo_target(ref, stored)`` rebuilds the same target from it under
any torch.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import random
import unittest
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from fuzzdiff import draws
from fuzzdiff.targets.opinfo_known import known_for
from fuzzdiff.targets.opinfo_sample import Fuzzed, SampleError, StoredSample, same_value
from fuzzdiff.targets.target import Only, Target, Tol
from strategies.values import sampling_interval

__all__ = [
    "PREFIX",
    "FAMILY",
    "CHECKS",
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
    "float32_skip",
    "samples",
    "OpInfoError",
]

PREFIX = "opinfo/"
FAMILY = "opinfo"
SEED = 0
SAMPLES_PER_OP = 2
MAX_NUMEL = 2048  # per sample, all fuzzed tensors together: finite differences stay cheap
MAX_FLOAT32 = 1e3  # float32 cases only where every value is at most this large
NEAR_SCALE = 1e-3  # near mode: |x| <= NEAR_SCALE * max(1, max |sample|)

# The checks run on OpInfo targets; every other check is skipped with this reason.
CHECKS = ("grad", "forward", "layout", "alias", "vmap", "compile", "gradgrad", "dtype", "mutation", "forward2")
OUTSIDE = f"not in the OpInfo check set ({', '.join(CHECKS)})"

# OpInfo test (class, name) pairs whose skip or expected failure means our check does
# not apply: the OpInfo author already knows the op fails (or cannot run) there.
TESTS = {
    "grad": (("TestBwdGradients", "test_fn_grad"), ("TestGradients", "test_fn_grad")),
    "forward": (("TestFwdGradients", "test_forward_mode_AD"), ("TestGradients", "test_forward_mode_AD")),
    "forward2": (
        ("TestFwdGradients", "test_fn_fwgrad_bwgrad"),
        ("TestGradients", "test_fn_fwgrad_bwgrad"),
        ("TestFwdGradients", "test_forward_mode_AD"),
    ),
    "layout": (("TestCommon", "test_noncontiguous_samples"),),
    "vmap": (
        ("TestVmapOperatorsOpInfo", "test_vmap_exhaustive"),
        ("TestOperators", "test_vmapvjp"),
        ("TestOperators", "test_vmapjvpall"),
    ),
    "compile": (
        ("TestEagerFusionOpInfo", "test_aot_autograd_exhaustive"),
        ("TestInductorOpInfo", "test_comprehensive"),
    ),
    "gradgrad": (("TestBwdGradients", "test_fn_gradgrad"), ("TestGradients", "test_fn_gradgrad")),
}

# Ops whose samples carry structure that random values in the same range lack.
# Matched as globs over the op key (``name`` or ``name.variant``).
_CONDITIONING = (
    "samples are built with structure (positive definite, full rank, well "
    "separated spectrum) that random entries lack; ill-conditioned points make "
    "finite differences meaningless"
)
NEAR = {
    **{
        f"linalg.{name}": _CONDITIONING
        for name in (
            "cholesky*",
            "cond",
            "det",
            "slogdet",
            "eig*",
            "householder_product",
            "inv*",
            "lstsq*",
            "lu*",
            "matrix_power",
            "matrix_rank*",
            "pinv*",
            "qr",
            "solve*",
            "svd*",
            "tensorinv",
            "tensorsolve",
        )
    },
    "cholesky*": _CONDITIONING,
    "lu*": _CONDITIONING,
    "triangular_solve": _CONDITIONING,
    "inverse": _CONDITIONING,
    "det": _CONDITIONING,
    "logdet": _CONDITIONING,
    "pinverse": _CONDITIONING,
    "svd*": _CONDITIONING,
    "pca_lowrank": _CONDITIONING,
    "qr": _CONDITIONING,
    "geqrf": _CONDITIONING,
    "ormqr": _CONDITIONING,
    "matrix_exp": _CONDITIONING,
    "nn.functional.ctc_loss": "log-probabilities must be normalized per frame",
}

# Ties are kinks here (order statistics, max pooling, inf-norms), and equal values in a
# normalized group make a point of extreme curvature (zero variance): values are
# spread apart within each argument (Target.distinct; no stride 0 then).
DISTINCT = (
    "max*",
    "min*",
    "amax",
    "amin",
    "aminmax",
    "*sort",
    "topk",
    "kthvalue",
    "*median",
    "mode",
    "cummax",
    "cummin",
    "nn.functional.*max_pool*",
    "nn.functional.max_unpool*",
    "masked.amax",
    "masked.amin",
    "masked.median",
    "*norm*",
    "var*",
    "std*",
    "masked.var",
    "masked.std",
    "nn.functional.pdist",
    "scatter_reduce.*",
    "index_reduce.*",
    "_native_batch_norm_legit*",
    "_batch_norm_with_update",
    "nn.functional.hardtanh",
    "nn.functional.relu6",
)

# Kinks where two *arguments* are equal: arguments drawn from one seed are equal
# elementwise, and the confirmation's neighbouring point keeps about 5% of such
# ties (see the report), so grad and forward would be confirmed at a kink.
TIES = (
    "clamp*",
    "clip*",
    "maximum",
    "minimum",
    "fmax",
    "fmin",
    "max.binary",
    "min.binary",
    "remainder",
    "fmod",
    "cdist",
    "dist",
    "nn.functional.pairwise_distance",
    "nn.functional.l1_loss",
    "nn.functional.smooth_l1_loss",
    "nn.functional.huber_loss",
    "nn.functional.margin_ranking_loss",
    "nn.functional.hinge_embedding_loss",
    "nn.functional.triplet_margin*",
    "nn.functional.multilabel_margin_loss",
    "nn.functional.multi_margin_loss",
    "nn.functional.soft_margin_loss",
    "where",
    "masked_*",
    "scatter_reduce.*",
    "index_reduce.*",
)
TIED = (
    "kinks where two arguments are equal; arguments drawn from one seed tie elementwise "
    "and the neighbouring-point confirmation keeps some ties, so a kink would be confirmed"
)

# Ops left out, with the reason (besides the automatic rules in ``_excluded``).
EXCLUDED = {
    "nn.functional.*dropout*": "random",
    "nn.functional.rrelu": "random",
    "nn.functional.gumbel_softmax": "random",
    "*bernoulli*": "random",
    "normal*": "random",
    "*multinomial*": "random",
    "*rand*_like": "random",
    "uniform": "random",
    "as_strided*": "reads the input's memory through explicit strides: its result depends on "
    "the layout, which this adapter fuzzes",
    "view_as_complex": "requires a last dim of stride 1 by contract",
    "view": "a view needs strides compatible with the new shape, by contract",
    "view_as": "a view needs strides compatible with the new shape, by contract",
    "empty*": "uninitialized output",
    "new_empty*": "uninitialized output",
}


# Ops whose contract refuses some inputs the adapter draws: torch's refusal, as
# (exception type, message pattern), rejects the case as outside the op's domain
# (Target.invalid), and the rest of the op is fuzzed. native_group_norm, the
# aten kernel F.group_norm calls, takes a contiguous input only (F.group_norm
# makes it so) and refuses any other; its weight and bias may have any layout.
# Each entry also names the checks whose OpInfo skip is that refusal and no more
# (native_group_norm's expected failure of test_noncontiguous_samples says "expects
# contiguous inputs"): they run, with the refused cases rejected.
CONTRACTS: dict[str, tuple[tuple[tuple[str, str], ...], tuple[str, ...]]] = {
    "native_group_norm": (
        (("RuntimeError", r"Expected X\.is_contiguous\(memory_format\) to be true"),),
        ("layout",),
    ),
}


_RUNNING_STATS = (
    "updates running_mean / running_var in place: vmap cannot write a batched "
    "update into an unbatched buffer (functorch documents this; the op raises)"
)
VMAP_SKIP = {
    **{
        name: _RUNNING_STATS
        for name in (
            "nn.functional.batch_norm",
            "nn.functional.instance_norm",
            "native_batch_norm",
            "_native_batch_norm_legit*",
            "_batch_norm_with_update",
        )
    },
    "nn.functional.multi_head_attention_forward": "calls dropout (a random op) even at p=0: vmap "
    "raises in its default randomness='error' mode",
}

# Ops whose float32 results are as good as float32 can be, though the dtype check
# cannot tell: a gradient that cancels element by element (the check's significance
# test is per tensor) is ill-conditioned in its intermediates.
DTYPE_SKIP = {
    "nn.functional.multi_head_attention_forward": "gradients that cancel to near zero "
    "(tied keys: stride 0 or aliased) move by more than float32's error when float64 "
    "rounds its intermediates at float32's level (fuzzdiff.confirm.RoundingNoise): "
    "elements without a significant digit in a tensor that has them",
}

# A call that closes over tensor constants (indices, masks, running stats) cannot be
# traced by aot_function, whose fake tensor mode rejects real tensors.
CONSTANTS = {
    "compile": "the call closes over tensor constants (indices, masks, running stats), "
    "which aot_function's fake tensor mode rejects"
}

# Tolerances of near-mode (linear algebra) targets: their samples can be ill-conditioned.
NEAR_TOL = Tol(
    1e-9,
    1e-5,
    "linear-algebra samples may be ill-conditioned (condition numbers "
    "up to ~1e4): rounding of the analytic side grows with it",
)


class OpInfoError(KeyError):
    def __str__(self):
        return self.args[0]


@functools.lru_cache(maxsize=1)
def op_db() -> tuple:
    """torch's OpInfo database (imports ``expecttest``; seconds, once)."""
    try:
        # optional dependency (expecttest), and seconds of startup: imported on first use
        from torch.testing._internal.common_methods_invocations import op_db as db
    except ImportError as e:  # expecttest missing: the optional extra ``opinfo``
        raise OpInfoError(f"the OpInfo database needs expecttest (pip install fuzzdiff[opinfo]): {e}") from None
    return tuple(db)


def op_key(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def _match(key: str, table: dict) -> str | None:
    return next((why for pattern, why in table.items() if fnmatch.fnmatchcase(key, pattern)), None)


def _excluded(op) -> str | None:
    """Why an op yields no targets (None: it does)."""
    if not op.supports_autograd:
        return "supports_autograd=False"
    if torch.float64 not in op.supported_backward_dtypes("cpu"):
        return "no float64 backward on CPU"
    # (gradcheck_nondet_tol is about CUDA's atomic adds; a CPU run that differs is inconclusive)
    if getattr(op, "has_nondeterministic_output", False):  # torch >= 2.12
        return "nondeterministic output (has_nondeterministic_output)"
    return _match(op_key(op), EXCLUDED)


@functools.lru_cache(maxsize=1)
def _ops() -> dict:
    return {op_key(op): op for op in op_db()}


def opinfo_ops() -> list:
    """The OpInfos that yield targets, in op_db's order (cheap once op_db is loaded)."""
    return [op for op in op_db() if _excluded(op) is None]


# -- samples --------------------------------------------------------------------------------


def samples(op) -> list:
    """The op's float64 CPU samples, the same on every call: sample_inputs draw from
    torch's, Python's and NumPy's generators, so all three are seeded (and restored)."""
    state, np_state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(SEED)
            random.seed(SEED)
            np.random.seed(SEED)
            return list(op.sample_inputs("cpu", torch.float64, requires_grad=True))
    finally:
        random.setstate(state)
        np.random.set_state(np_state)


def _fuzzable(t: Any) -> bool:
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
    fuzzed = [t for t in tensors if _fuzzable(t)]
    return (
        bool(fuzzed)
        and all(t.layout == torch.strided and t.device.type == "cpu" for t in tensors)
        and sum(t.numel() for t in fuzzed) <= MAX_NUMEL
        and all(torch.isfinite(t).all() for t in fuzzed)
    )  # -inf masks are values we cannot draw


# -- one target per chosen sample -------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Call:
    """A sample's call with its fuzzed tensors as positional arguments.

    ``near[i]`` is None in range mode, else the sample tensor that argument ``i``
    perturbs. Constant floating tensors follow the fuzzed dtype, so a float32
    case does not mix dtypes the sample never mixed. ``values`` and ``index``
    are what a record stores besides (``stored_sample``): the sample's own
    values of the fuzzed arguments, and the sample's index.
    """

    op: Any
    spec: Any  # the pytree spec of (input, args, kwargs)
    leaves: tuple  # the sample's leaves; fuzzed positions are replaced
    positions: tuple[int, ...]  # leaf index of each fuzzed argument
    near: tuple
    output_fn: Callable
    values: tuple = ()
    index: int = -1

    def __call__(self, *tensors):
        # Fresh constants per call: some ops update them in place (batch_norm's running stats).
        # The sample was made in float64 on the CPU: its tensors, and an argument naming its
        # dtype (_softmax_backward_data's input_dtype), follow the fuzzed tensors.
        dtype, device = (tensors[0].dtype, tensors[0].device) if tensors else (torch.float64, None)
        leaves = [
            t.to(device, dtype if t.is_floating_point() else t.dtype, copy=True)
            if isinstance(t, torch.Tensor)
            else dtype
            if t is torch.float64
            else t
            for t in self.leaves
        ]  # fuzzed positions hold None
        for pos, t, s in zip(self.positions, tensors, self.near):
            leaves[pos] = t if s is None else t + s.to(t.device, t.dtype)
        inp, args, kwargs = tree_unflatten(leaves, self.spec)
        out = self.op.gradcheck_wrapper(self.op.op, inp, *args, **kwargs)
        return self.output_fn(out)


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


def _valid_at(call: Call, points: list[torch.Tensor]) -> bool:
    """The call runs, and its outputs and gradients are finite, at ``points``."""
    xs = [p.detach().requires_grad_() for p in points]
    try:
        out = call(*xs)
        outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor) and o.requires_grad]
        if not _finite(out):
            return False
        if outs:
            total = sum((torch.view_as_real(o) if o.is_complex() else o).sum() for o in outs)
            assert isinstance(total, torch.Tensor)  # a sum of one or more tensors
            grads = torch.autograd.grad(total, xs, allow_unused=True)
            return _finite([g for g in grads if g is not None])
        return True
    except Exception:  # noqa: BLE001 - any error means the points are not valid inputs
        return False


@dataclass(frozen=True, eq=False)
class _Differentiable:
    """An ``output_fn`` that keeps only the output leaves autograd differentiates.

    Some ops return floating outputs that depend on the input but that torch
    declares non-differentiable (``output_differentiability`` in
    derivatives.yaml: native_batch_norm's save_mean / save_invstd,
    native_layer_norm's mean / rstd): they never require grad, and
    ``torch.autograd.gradcheck``, which OpInfo's own tests run, skips them. The
    checks take every floating output as part of the function, so finite
    differences would see a derivative that reverse mode, by contract, never
    has. ``keep[i]``: whether output leaf ``i`` stays.
    """

    fn: Callable
    keep: tuple[bool, ...]

    def __call__(self, out):
        leaves = tree_flatten(self.fn(out))[0]
        kept = tuple(o for o, k in zip(leaves, self.keep) if k)
        return kept[0] if len(kept) == 1 else kept


def _differentiable_outputs(call: Call, fuzzed: list[torch.Tensor]) -> tuple[bool, ...] | None:
    """Which output leaves to keep (see ``_Differentiable``): every one but the
    floating leaves that do not require grad while another does. None: all."""
    xs = [p.detach().requires_grad_() for p in fuzzed]
    outs = tree_flatten(call(*xs))[0]
    floating = [isinstance(o, torch.Tensor) and (o.is_floating_point() or o.is_complex()) for o in outs]
    if not any(f and o.requires_grad for f, o in zip(floating, outs)):
        return None  # no output requires grad (e.g. zeros_like): nothing to tell apart
    keep = tuple(not f or o.requires_grad for f, o in zip(floating, outs))
    return None if all(keep) else keep


def _random_points(intervals, fuzzed, seed: int) -> list[torch.Tensor]:
    """Uniform points of the intervals, one stream of fuzzdiff.draws for all
    arguments: the same target under every torch that gives the same samples."""
    points, start = [], 0
    for (lo, hi), t in zip(intervals, fuzzed):
        z = draws.words(seed, t.numel(), draws.POINTS, start)
        points.append(torch.from_numpy(draws.uniform(z, lo, hi)).reshape(t.shape))
        start += t.numel()
    return points


def _deterministic(call: Call, fuzzed) -> bool:
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


def skips_for(op, near: bool, complex_out: bool = False) -> dict[str, str]:
    """Check name -> why it does not apply, from the OpInfo's flags and skips
    (and our own tables)."""
    skip = {}
    if any(fnmatch.fnmatchcase(op_key(op), p) for p in TIES):
        skip["grad"] = skip["forward"] = skip["gradgrad"] = TIED
    if complex_out:
        skip["vmap"] = "complex outputs: the vmap check's vjp compositions need real outputs (fuzzdiff.paths.vmap)"
    vmap_skip = _match(op_key(op), VMAP_SKIP)
    if vmap_skip:
        skip["vmap"] = vmap_skip
    dtype_skip = _match(op_key(op), DTYPE_SKIP)
    if dtype_skip:
        skip["dtype"] = dtype_skip
    flags = {
        "forward": (op.supports_forward_ad, "OpInfo supports_forward_ad=False"),
        "forward2": (
            op.supports_forward_ad and op.supports_fwgrad_bwgrad,
            "OpInfo supports_forward_ad or supports_fwgrad_bwgrad is False",
        ),
        "vmap": (
            op.check_batched_grad and (op.check_batched_forward_grad or not op.supports_forward_ad),
            "OpInfo check_batched_grad / check_batched_forward_grad is False: "
            "its gradients are not batchable with vmap",
        ),
        "gradgrad": (op.supports_gradgrad, "OpInfo supports_gradgrad=False"),
    }
    for check, (ok, why) in flags.items():
        if not ok:
            skip.setdefault(check, why)
    for check, tests in TESTS.items():
        hit = _skipped_test(op, tests)
        if hit and check not in skip:
            skip[check] = f"OpInfo skips or expects failure of {hit} (float64, cpu)"
    if near:
        skip["alias"] = (
            "values are pinned near the sample (each argument is sample + x): aliasing of x never reaches the op"
        )
        skip["mutation"] = (
            "values are pinned near the sample (each argument is sample + x): the op gets a fresh "
            "tensor, so a write to it never reaches x"
        )
    return skip


def float32_skip(op, near: bool, intervals: Iterable[tuple[float, float]]) -> str | None:
    """Why a target has no float32 cases (so no ``dtype`` check); None: it has."""
    if near:
        return "values are pinned near a structured sample (NEAR): float64 only"
    if torch.float32 not in op.supported_backward_dtypes("cpu"):
        return "float32 is not among the OpInfo's supported_backward_dtypes on CPU"
    # OpInfo samples hold values up to 1e6 on purpose (logsumexp), where float32
    # rounding of the inputs alone moves the results.
    if not all(max(abs(lo), abs(hi)) <= MAX_FLOAT32 for lo, hi in intervals):
        return f"sample values beyond {MAX_FLOAT32:g}: float32 rounding of the inputs alone moves the results"
    return None


def _is_skip(decorator) -> bool:
    """unittest.skip(...) and unittest.expectedFailure; not tolerance overrides or
    decorators that skip elsewhere (skipIfRocm)."""
    return decorator is unittest.expectedFailure or getattr(decorator, "__qualname__", "").startswith("skip.")


def _skipped_test(op, tests) -> str | None:
    for d in op.decorators:
        if not hasattr(d, "is_active") or not any(_is_skip(x) for x in d.decorators):
            continue
        for cls, test in tests:
            if d.is_active(cls, test, "cpu", torch.float64, {}):
                return f"{cls}.{test}"
    return None


def _chosen(usable: list[int]) -> list[int]:
    """The first and the last usable sample: usually the plainest call and one
    with the most options (broadcasting, keyword arguments)."""
    return sorted({usable[0], usable[-1]})[:SAMPLES_PER_OP] if usable else []


INVALID_AT_RANDOM = "invalid (error or non-finite) at random points of the sample's ranges"


def _target(op, index: int, sample) -> Target | None:
    flat, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    positions = tuple(k for k, t in enumerate(flat) if _fuzzable(t))
    return _build(op, index, spec, flat, positions, sample.output_process_fn_grad)


def _build(
    op,
    index: int,
    spec,
    flat: list,
    positions: tuple[int, ...],
    output_fn: Callable,
    stored: StoredSample | None = None,
) -> Target | None:
    """The target of one sample's call (None: the call is not valid at the sample).

    With ``stored`` (a record's sample), whether the arguments perturb the
    sample (near mode) and which outputs are kept are the record's: they give
    its stored values their meaning. Everything else is found as for any sample.
    """
    key = op_key(op)
    fuzzed = [flat[k].detach() for k in positions]
    leaves = tuple(
        None if k in positions else t.detach() if isinstance(t, torch.Tensor) else t for k, t in enumerate(flat)
    )
    constants = any(isinstance(t, torch.Tensor) for t in leaves)
    values = tuple(fuzzed)

    def make(output_fn: Callable, near: tuple) -> Call:
        return Call(op, spec, leaves, positions, near, output_fn, values, index)

    call = make(output_fn, (None,) * len(positions))
    if not _valid_at(call, fuzzed) or not _deterministic(call, fuzzed):
        return None
    keep = _differentiable_outputs(call, fuzzed) if stored is None else stored.keep
    if keep is not None:
        output_fn = _Differentiable(output_fn, keep)
        call = make(output_fn, (None,) * len(positions))
    near = _match(key, NEAR)
    intervals = _range_intervals(op, fuzzed)
    if stored is not None:
        near = (near or INVALID_AT_RANDOM) if stored.near else None
    elif near is None and not all(_valid_at(call, _random_points(intervals, fuzzed, s)) for s in (1, 2)):
        near = INVALID_AT_RANDOM
    if near is not None:
        call = make(output_fn, values)
        intervals = [
            (-d, d) for d in (NEAR_SCALE * max(1.0, t.abs().max().item() if t.numel() else 1.0) for t in fuzzed)
        ]
    with torch.no_grad():
        complex_out = any(isinstance(o, torch.Tensor) and o.is_complex() for o in tree_flatten(call(*fuzzed))[0])
    names = [f"a{i}" for i in range(len(fuzzed))]
    no32 = float32_skip(op, near is not None, intervals)
    refused, contract_checks = CONTRACTS.get(key, ((), ()))
    name = f"{key}@{index}"
    return Target(
        name,
        call,
        ", ".join(f"{n}: {' '.join(map(str, t.shape))}".rstrip() for n, t in zip(names, fuzzed)),
        FAMILY,
        sample=dict(zip(names, intervals)),
        dtypes=(torch.float64,) if no32 else (torch.float64, torch.float32),
        distinct=any(fnmatch.fnmatchcase(key, p) for p in DISTINCT),
        tolerances={c: NEAR_TOL for c in ("grad", "forward", "gradgrad", "layout", "alias", "vmap")} if near else {},
        only=Only(CHECKS, OUTSIDE),
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
    )


@functools.cache
def _op_targets(key: str) -> tuple[Target, ...]:
    op = _ops()[key]
    all_samples = samples(op)
    usable = [k for k, s in enumerate(all_samples) if _usable(s)]
    out = []
    for k in _chosen(usable):
        t = _target(op, k, all_samples[k])
        if t is not None:
            out.append(t)
    return tuple(out)


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
    op = _ops().get(key) if sep and index.isdigit() else None
    if op is None and stored is not None and sep and index.isdigit():
        raise OpInfoError(f"torch {torch.__version__}'s op_db has no OpInfo {key!r} to rebuild {ref} from")
    if op is None:
        raise OpInfoError(
            f"unknown OpInfo target {ref!r}: expected opinfo/<op>[.<variant>]@<sample index> of an op in torch's op_db"
        )
    why = _excluded(op)
    if stored is not None:
        if why is not None:
            raise OpInfoError(f"OpInfo {key!r} yields no targets on torch {torch.__version__} ({why})")
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
    torch (fuzzdiff.targets.opinfo_sample); SampleError when its call holds a
    value a record cannot store (the record then names its target by index only)."""
    call = target.fn
    if not isinstance(call, Call):
        raise SampleError("", f"target {target.name!r} is not an OpInfo sample's call")
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


def unwrapped_output(fn: Callable) -> tuple[Callable, tuple[bool, ...] | None]:
    """A call's output processing: the sample's own, and the outputs kept (``_Differentiable``)."""
    if isinstance(fn, _Differentiable):
        return fn.fn, fn.keep
    return fn, None


def is_identity(fn: Callable) -> bool:
    """``fn`` hands back what it is given (tried on a sentinel)."""
    sentinel = object()
    try:
        return fn(sentinel) is sentinel
    except Exception:  # noqa: BLE001 - it looks inside its argument: not the identity
        return False


def _unchanged(out):
    return out


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
    output_fn = _unchanged if stored.output == "identity" else _processing(op, stored)
    target = _build(op, int(index), spec, flat, positions, output_fn, stored)
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
        _fuzzable(a) and same_value(a, stored.fuzzed[b.index]) if isinstance(b, Fuzzed) else same_value(a, b)
        for a, b in zip(flat, marked)
    )
