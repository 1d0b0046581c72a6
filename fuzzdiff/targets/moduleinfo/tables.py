"""What fuzzdiff declares about torch's ModuleInfos, apart from the code that reads it.

As fuzzdiff.targets.opinfo.tables does for ops: which modules yield no targets
(``EXCLUDED``), whose values are spread apart (``DISTINCT``), which of
torch's module tests stand for which check (``MODULE_TESTS``: a module that
skips the test, or expects it to fail, skips the check) and which checks do
not apply to any ModuleInfo target (``SKIP``). Module patterns are globs
over the ModuleInfo's name (``nn.LSTM``).
"""

from __future__ import annotations

import fnmatch

__all__ = [
    "PREFIX",
    "FAMILY",
    "SEED",
    "MAX_NUMEL",
    "EVAL",
    "EXCLUDED",
    "DISTINCT",
    "MODULE_TESTS",
    "SKIP",
    "RUNNING_STATS",
    "match",
]

PREFIX = "modules/"
FAMILY = "moduleinfo"
SEED = 0  # module_inputs_func and the modules' initial parameters are drawn under it
# per sample, forward inputs and parameters together: finite differences stay cheap, and
# a campaign worker's memory stays small with Transformers and RNNs in the plan
MAX_NUMEL = 2048
EVAL = "_eval"  # the name's suffix of an eval-mode target, where train and eval differ

EXCLUDED = {
    "nn.Lazy*": "lazy modules materialize their parameters at the first call, from its input's "
    "shape: their materialized forms (nn.Conv*, nn.ConvTranspose*) are targets of the family",
    "nn.LinearCrossEntropyLoss": "its samples (857) exercise argument validation, and torch's "
    "module tests skip its gradcheck (test_grad, test_gradgrad)",
}

# Ties are kinks here (max pooling, margins): values are spread apart (Target.distinct).
DISTINCT = ("nn.*MaxPool*", "nn.MultiLabelMarginLoss", "nn.MultiMarginLoss")

# check -> torch's module tests (TestModule.<name>) that stand for it: a ModuleInfo that
# skips one, or expects it to fail, on float64 CPU skips the check
MODULE_TESTS: dict[str, tuple[str, ...]] = {
    "grad": ("test_grad",),
    "forward": ("test_grad",),
    "checkpoint": ("test_grad",),
    "vmap": ("test_grad",),
    "gradgrad": ("test_gradgrad",),
    "forward2": ("test_gradgrad",),
    "layout": ("test_non_contiguous_tensors",),
    "alias": ("test_non_contiguous_tensors",),
    "device": ("test_cpu_gpu_parity",),
}

SKIP = {
    "per_sample": "a ModuleInfo target is a function of the forward inputs and the parameters "
    "(fuzzed arguments); per-sample gradients need a module target built for one sample "
    "(Target.module, fuzzdiff.targets.module), as the catalog's modules family has",
    "opcheck": "not a custom op",
}

# vmap of a training-mode norm that tracks running statistics: torch.func documents that it
# refuses (the statistics are updated in place, unbatched), and how to patch a module for it
RUNNING_STATS = (
    "training mode with running statistics: vmap refuses to update the unbatched running_mean "
    "and running_var in place with batched statistics, as torch.func documents (its batch norm "
    "patching page: track_running_stats=False or torch.func.replace_all_batch_norm_modules_)"
)


def match(name: str, table: dict[str, str]) -> str | None:
    """The reason of the first pattern of ``table`` that ``name`` matches."""
    return next((why for pattern, why in table.items() if fnmatch.fnmatchcase(name, pattern)), None)
