"""PyTorch's ModuleInfo database as fuzz targets (family ``moduleinfo``): all, some, one.

Each ModuleInfo of ``module_db`` not ``EXCLUDED`` gives up to two targets per
mode (training, and eval where the two differ), one per chosen
``ModuleInput`` (fuzzdiff.targets.moduleinfo.build). Targets are built
lazily: importing ``module_db`` takes seconds. A target's name names the
module, the sample's index and the mode, and samples are drawn under a fixed
seed, so a case or a corpus record names its target by that name alone and
replays on the torch it was found with (``get_moduleinfo_target``).
"""

from __future__ import annotations

import fnmatch
import functools
import warnings
from collections.abc import Iterable

import torch

from fuzzdiff.targets.moduleinfo.build import modes, sample_targets, samples, target_name
from fuzzdiff.targets.moduleinfo.tables import EVAL, EXCLUDED, FAMILY, PREFIX, match
from fuzzdiff.targets.target import Target, TargetUnavailable

__all__ = [
    "PREFIX",
    "FAMILY",
    "ModuleInfoError",
    "module_db",
    "moduleinfos",
    "excluded",
    "module_targets",
    "moduleinfo_targets",
    "select",
    "get_moduleinfo_target",
]


class ModuleInfoError(TargetUnavailable):
    """A ModuleInfo target that this torch's module_db cannot give."""


@functools.lru_cache(maxsize=1)
def module_db() -> tuple:
    """torch's ModuleInfo database (imports ``expecttest``; seconds, once)."""
    try:
        # optional dependency (expecttest), and seconds of startup: imported on first use
        from torch.testing._internal.common_modules import module_db as db
    except ImportError as e:  # expecttest missing: the optional extra ``opinfo``
        raise ModuleInfoError(f"the ModuleInfo database needs expecttest (pip install fuzzdiff[opinfo]): {e}") from None
    return tuple(db)


def excluded(info) -> str | None:
    """Why a ModuleInfo yields no targets (None: it does)."""
    if torch.float64 not in info.dtypes:
        return "float64 is not among the ModuleInfo's dtypes"
    return match(info.name, EXCLUDED)


def moduleinfos() -> list:
    """The ModuleInfos that yield targets, in module_db's order."""
    return [info for info in module_db() if excluded(info) is None]


@functools.cache
def _module_targets(name: str) -> tuple[Target, ...]:
    info = next(i for i in module_db() if i.name == name)
    with warnings.catch_warnings():
        # modules warn about their own options (enable_nested_tensor, batch_first) on purpose
        warnings.simplefilter("ignore")
        return tuple(t for training in modes(info) for t in sample_targets(info, training))


def module_targets(info) -> list[Target]:
    """The targets of one ModuleInfo (built on first use, then cached)."""
    return list(_module_targets(info.name))


def moduleinfo_targets(infos: Iterable | None = None) -> list[Target]:
    """Targets of ``infos`` (default: every ModuleInfo that yields targets), sorted by name."""
    infos = moduleinfos() if infos is None else infos
    return sorted((t for info in infos for t in module_targets(info)), key=lambda t: t.name)


def select(patterns: Iterable[str]) -> list[Target]:
    """ModuleInfo targets whose name (``modules/nn.LSTM_0``) matches a glob;
    builds only the modules one of whose samples' names a pattern matches
    (``fuzzdiff run --targets``)."""
    pats = list(patterns)
    infos = [info for info in moduleinfos() if any(fnmatch.fnmatchcase(n, p) for n in _names(info) for p in pats)]
    return [t for t in moduleinfo_targets(infos) if any(fnmatch.fnmatchcase(t.name, p) for p in pats)]


def _names(info) -> list[str]:
    """The name of every sample of the ModuleInfo in every mode (drawing samples is cheap; building targets is not)."""
    return [target_name(info, k, training) for training in modes(info) for k in range(len(samples(info, training)))]


def get_moduleinfo_target(name: str) -> Target:
    """The target a case names, ``modules/<module>_<index>[_eval]``; builds only that module."""
    stem = name.removeprefix(PREFIX).removesuffix(EVAL)
    module, sep, index = stem.rpartition("_")
    info = next((i for i in module_db() if i.name == module), None) if sep and index.isdigit() else None
    if info is None:
        raise ModuleInfoError(
            f"unknown ModuleInfo target {name!r}: expected modules/<module>_<sample index>[_eval] of a module in "
            "torch's module_db"
        )
    why = excluded(info)
    found = next((t for t in module_targets(info) if t.name == name), None) if why is None else None
    if found is None:
        raise ModuleInfoError(
            f"ModuleInfo {module!r} has no target {name!r}"
            + (f" ({why})" if why else f"; its targets: {[t.name for t in module_targets(info)]}")
        )
    return found
