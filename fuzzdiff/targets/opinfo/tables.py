"""What fuzzdiff declares about torch's OpInfos, apart from the code that reads it.

As PyTorch's OpInfo database keeps its declarations (common_methods_invocations)
apart from the tests that consume them, these tables say which ops yield no
targets (``EXCLUDED``), which are fuzzed near their samples (``NEAR``), whose
values are spread apart (``DISTINCT``), which checks do not apply to which ops
(``TIES``, ``VMAP_SKIP``, ``DTYPE_SKIP``, ``CONSTANTS``) and which refusals are an op's
contract (``CONTRACTS``). Op patterns are globs over the op key (``op_key``:
``name`` or ``name.variant``). fuzzdiff.targets.opinfo.skips and
fuzzdiff.targets.opinfo.build read them. Which OpInfo flags and tests stand
for a check is the check's own declaration (``Check.opinfo``,
fuzzdiff.targets.role).
"""

from __future__ import annotations

import fnmatch

from fuzzdiff.targets.target import Tol

__all__ = [
    "PREFIX",
    "FAMILY",
    "SEED",
    "SAMPLES_PER_OP",
    "MAX_NUMEL",
    "MAX_FLOAT32",
    "NEAR_SCALE",
    "SCALAR_SCALE",
    "SCALARS_PER_SAMPLE",
    "SCALAR_EXCLUDED",
    "OUTSIDE",
    "REFINES",
    "NEAR",
    "DISTINCT",
    "TIES",
    "TIED",
    "EXCLUDED",
    "CONTRACTS",
    "VMAP_SKIP",
    "DTYPE_SKIP",
    "CONSTANTS",
    "NEAR_TOL",
    "op_key",
    "match",
    "listed",
]

PREFIX = "opinfo/"
FAMILY = "opinfo"
SEED = 0
SAMPLES_PER_OP = 2
MAX_NUMEL = 2048  # per sample, all fuzzed tensors together: finite differences stay cheap
MAX_FLOAT32 = 1e3  # float32 cases only where every value is at most this large
NEAR_SCALE = 1e-3  # near mode: |x| <= NEAR_SCALE * max(1, max |sample|)
# A sample's number as a 0-dim tensor (fuzzdiff.targets.opinfo.build.scalar_targets) is
# drawn within SCALAR_SCALE * |number| of it (SCALAR_SCALE of 0): its sign and magnitude
# stay, and the examples of a vmap batch still differ well beyond rounding.
SCALAR_SCALE = 1e-2
SCALARS_PER_SAMPLE = 2  # numbers as tensors, per sample: the first ones the op takes as tensors

# Why a check without an OpInfo role (Check.opinfo) does not run on OpInfo targets;
# it names the checks that have one (tests/unit/targets/test_opinfo_adapter.py holds it to them).
OUTSIDE = (
    "not in the OpInfo check set (grad, forward, layout, alias, vmap, compile, gradgrad, dtype, mutation, forward2, "
    "compiled_autograd, export)"
)

# OpInfo flags that refine another (torch's OpInfo says so, and defaults them to it):
# where the one refined is False, the refining flag says nothing.
REFINES = {"check_batched_forward_grad": "supports_forward_ad"}

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

# Ops left out, with the reason (besides the automatic rules of fuzzdiff.targets.opinfo.skips.excluded).
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

# Ops whose sample numbers are not fuzzed as 0-dim tensors, with the reason (besides the
# automatic rules of fuzzdiff.targets.opinfo.build.scalar_targets: the op must take the
# tensor, give the number's outputs, let autograd reach it, and be valid near it).
SCALAR_EXCLUDED = {
    "nn.functional.triplet_margin_with_distance_loss": "its margin is compared with 0 in Python "
    "(``if margin <= 0``): vmap cannot batch a margin it reads, and grad and forward skip it (TIES)",
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
    "nn.functional.group_norm": "samples whose groups hold two values normalize them to a near "
    "constant (+-1, -+1) * sqrt(var / (var + eps)): the gradient is a cancellation that float32 "
    "computes to few significant digits (sample 20: 1.4e-5 off a gradient of 2.3e-4); the catalog's "
    "group_norm targets judge dtype",
    "nn.functional.multi_head_attention_forward": "gradients that cancel to near zero "
    "(tied keys: stride 0 or aliased) move by more than float32's error when float64 "
    "rounds its intermediates at float32's level (fuzzdiff.confirm.identities.RoundingNoise): "
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


def op_key(op) -> str:
    """The key an OpInfo is named and matched by: ``name``, or ``name.variant``."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def match(key: str, table: dict[str, str]) -> str | None:
    """The reason of the first pattern of ``table`` that ``key`` matches; None: none does."""
    return next((why for pattern, why in table.items() if fnmatch.fnmatchcase(key, pattern)), None)


def listed(key: str, patterns: tuple[str, ...]) -> bool:
    """``key`` matches one of ``patterns``."""
    return any(fnmatch.fnmatchcase(key, p) for p in patterns)
