"""The command line's arguments, checked in one place for every command that takes them.

Each check raises ``UsageError``, which names the option and what was wrong
(exit status 2, no traceback), so that ``fuzzdiff run`` and ``fuzzdiff check``
refuse a bad ``--budget`` or ``--dtypes`` in the same words. ``resolve_config``
is the one place a command reads the environment.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from fuzzdiff.case.case import DTYPES
from fuzzdiff.config import ConfigError, FuzzConfig
from fuzzdiff.errors import FuzzdiffError
from fuzzdiff.record.files import default_root, find_record
from fuzzdiff.targets.user_import import is_module_name

__all__ = [
    "UsageError",
    "allowed_imports",
    "at_least_one",
    "corpus_root",
    "device_option",
    "dtypes_option",
    "positive",
    "record_path",
    "resolve_config",
    "split",
]


class UsageError(FuzzdiffError):
    """Bad input from the command line: exit status 2, a message, no traceback."""


def split(values: list[str] | None) -> list[str] | None:
    """``--checks grad,vmap layout`` -> ["grad", "vmap", "layout"]; None where none is given."""
    if not values:
        return None
    return [p for v in values for p in v.split(",") if p]


def resolve_config(**options) -> FuzzConfig:
    """The command's settings, resolved once: the defaults, then $FUZZDIFF_*,
    then its flags (those given). The one place a command reads the
    environment; everything it runs is handed the result."""
    try:
        return FuzzConfig.resolve(os.environ, **options)
    except ConfigError as e:
        raise UsageError(str(e)) from None


def at_least_one(value: int | None, option: str) -> None:
    """A count given (not None) must be at least 1."""
    if value is not None and value < 1:
        raise UsageError(f"{option} must be at least 1")


def positive(value: float | None, option: str, hint: str = "") -> None:
    """A number of seconds given (not None) must be positive; nan is not."""
    if value is not None and not value > 0:
        raise UsageError(f"{option} must be positive{hint}")


def _floating(name: str) -> bool:
    return name in DTYPES and (DTYPES[name].is_floating_point or DTYPES[name].is_complex)


def dtypes_option(values: list[str] | None) -> list[torch.dtype] | None:
    """--dtypes as torch dtypes, floating or complex (None: not given)."""
    names = split(values)
    if not names:
        return None
    bad = [d for d in names if not _floating(d)]
    if bad:
        raise UsageError(
            f"--dtypes: unknown or non-floating dtype(s) {', '.join(bad)}; expected some of "
            + ", ".join(d for d in DTYPES if _floating(d))
        )
    return [DTYPES[d] for d in names]


def device_option(name: str | None, cluster: bool = False) -> str | None:
    """--device: cpu or cuda (cuda:N); cuda only where torch sees a GPU (with
    --ray, the cluster's GPUs: fuzzdiff.campaign.cluster checks there are some)."""
    if name is None:
        return None
    if name == "cpu":
        return name
    if name.split(":")[0] != "cuda":
        raise UsageError(f"--device {name!r}: expected cpu or cuda (cuda:N)")
    if cluster:
        return name
    if not torch.cuda.is_available():
        raise UsageError(
            f"--device {name}: no CUDA device is available to torch "
            f"{torch.__version__} (CUDA build: {torch.version.cuda or 'no'})"
        )
    try:
        torch.device(name)
        index = torch.device(name).index
    except RuntimeError as e:
        raise UsageError(f"--device {name!r}: {e}") from None
    if index is not None and index >= torch.cuda.device_count():
        raise UsageError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s)")
    return name


def corpus_root(args) -> Path:
    """--corpus, else $FUZZDIFF_CORPUS, else ./corpus (the environment read only without --corpus)."""
    return Path(args.corpus) if args.corpus is not None else default_root(resolve_config().corpus)


def record_path(args, ref: str) -> Path:
    """The record that ``ref`` names (a path, an id or an id's unique prefix) in the command's corpus."""
    return find_record(corpus_root(args), ref)


def allowed_imports(args) -> list[str]:
    """--allow-import: module names, each also allowing its submodules."""
    names = args.allow_import or []
    bad = [n for n in names if not is_module_name(n)]
    if bad:
        raise UsageError(f"--allow-import {bad[0]!r}: expected a module name such as mypkg or mypkg.ops")
    return names
