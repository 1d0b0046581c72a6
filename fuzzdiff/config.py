"""The settings of a fuzzing run, in one frozen object built in one place.

``FuzzConfig.resolve`` layers them: the defaults, then the ``FUZZDIFF_*``
environment variables (and Hypothesis's ``$HYPOTHESIS_STORAGE_DIRECTORY``),
then the command line or pytest options, then the arguments of
``fuzzdiff.check``. The drivers (the command line, the pytest plugin,
``fuzzdiff.check``) resolve it and pass it down explicitly, to a campaign's
workers too (a plain dataclass: it pickles); nothing below them reads or
writes the environment, and a missing config means the defaults.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from fuzzdiff.errors import FuzzdiffError

__all__ = [
    "FuzzConfig",
    "ConfigError",
    "BATCH_SECONDS",
    "ENVIRONMENT",
    "COMPILE_BACKENDS",
    "COMPILED_AUTOGRAD_BACKENDS",
    "COMPILE_TRANSFORMS",
    "default_corpus",
]

# torch.compile backends and aot_function partitioners the compile check draws from
COMPILE_BACKENDS = ("aot_function", "aot_function_min_cut", "aot_eager", "inductor")
# what the compile check compiles besides f itself ("none"): torch.func transforms of f,
# and f at dual inputs (fuzzdiff.paths.compiled)
COMPILE_TRANSFORMS = ("none", "grad", "vjp", "jvp", "vmap", "dual")
# what compiled autograd hands its captured backward graph to: "ca_eager", nothing
# (the capture run as captured, as torch's own compiled autograd tests name it),
# or torch.compile with "eager" (a dynamo trace) or "inductor" (code generation)
COMPILED_AUTOGRAD_BACKENDS = ("ca_eager", "eager", "inductor")


# a campaign batch's own deadline, in seconds: one slow pair cannot hold a worker for long
BATCH_SECONDS = 10.0


class ConfigError(FuzzdiffError, ValueError):
    """A setting that cannot be used; the message names the setting and where it came from."""


@dataclass(frozen=True)
class FuzzConfig:
    """corpus:           where shrunk failures are written (None: nowhere).
    variants:         value-and-probe variants each drawn case runs at.
    structures:       drawn cases per Hypothesis example (structures // 2 to structures).
    timeout:          seconds one example may run before it is reported as a
                      time-out (0 disables); compile checks get a multiple of it.
    redis_url:        a Redis server that shares Hypothesis's example database.
    compile_backends: the backends the compile check draws from (default: all).
    compile_transforms: the transforms the compile check draws from (default:
                      all; a transform a backend cannot take is not drawn).
    compiled_autograd_backends: what the compiled_autograd check hands the
                      captured backward to (default: all; inductor only where
                      compile_backends has it too).
    hypothesis_storage: Hypothesis's storage directory (None: its default,
                      ./.hypothesis), as this process's Hypothesis finds it: a
                      campaign worker, maybe on another machine, is told it.
    seed:             makes a run reproducible (None: Hypothesis's own seeding).
    shrink_seconds:   how long a failure may shrink after it is found (None:
                      until Hypothesis is done).
    journal_dir:      where examples are journaled when there is no corpus (a
                      campaign worker on a machine without it,
                      fuzzdiff.campaign.cluster).
    recover_crashes:  turn dead processes' journal entries into crash records
                      when a run starts (False: a campaign's parent records
                      them, with how its worker died).
    capture_logs:     count torch's log messages into the tally, rather than
                      print them (fuzzdiff.guards.torch_logs).
    case_options:     how cases are drawn, beside what the check and target
                      say (strategies.cases.case_plan: ``max_side``,
                      ``alias``, ``layout_features``, ``dtypes``, ...).

    A campaign's own (``fuzzdiff run``, fuzzdiff.campaign.loop.run_campaign):

    jobs:             worker processes (None: every core; on Ray, every CPU).
    budget:           seconds after which no batch starts (None: rounds decide).
    rounds:           rounds of batches (None: one round without a budget).
    grace:            how long after the budget a busy worker may finish
                      shrinking (None: a fifth of the budget, at least 30 s).
    batch_examples:   Hypothesis examples per batch, before a pair's own narrowing.
    batch_seconds:    a batch's own deadline (None: no bound).
    dtypes:           the dtypes cases are drawn at, by name (None: each
                      target's own).
    device:           the device cases run on (None: each target's own).
    database_url:     Hypothesis's example database for the campaign's
                      workers: None for none, "" for the local directory
                      (``example_dir``), or a Redis URL shared beside it.
    """

    corpus: Path | None = None
    variants: int = 16
    structures: int = 8
    timeout: float = 60.0
    redis_url: str | None = None
    compile_backends: tuple[str, ...] = COMPILE_BACKENDS
    compile_transforms: tuple[str, ...] = COMPILE_TRANSFORMS
    compiled_autograd_backends: tuple[str, ...] = COMPILED_AUTOGRAD_BACKENDS
    hypothesis_storage: Path | None = None
    seed: int | None = None
    shrink_seconds: float | None = None
    journal_dir: Path | None = None
    recover_crashes: bool = True
    capture_logs: bool = True
    case_options: Mapping[str, Any] = field(default_factory=dict, hash=False)
    jobs: int | None = None
    budget: float | None = None
    rounds: int | None = None
    grace: float | None = None
    batch_examples: int = 48
    batch_seconds: float | None = BATCH_SECONDS
    dtypes: tuple[str, ...] | None = None
    device: str | None = None
    database_url: str | None = None

    def __post_init__(self) -> None:
        for name in _PATHS:  # a directory given as a string is a Path
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path):
                object.__setattr__(self, name, Path(value))
        if self.shrink_seconds is not None and not self.shrink_seconds >= 0:
            raise ConfigError(f"shrink_seconds must be >= 0, got {self.shrink_seconds!r}")
        for name in ("variants", "structures", "batch_examples"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        if not isinstance(self.timeout, (int, float)) or not math.isfinite(self.timeout) or self.timeout < 0:
            raise ConfigError(f"timeout must be a number of seconds >= 0 (0 disables), got {self.timeout!r}")
        unknown = sorted(set(self.compile_backends) - set(COMPILE_BACKENDS))
        if unknown or not self.compile_backends:
            raise ConfigError(
                f"compile_backends must name some of {', '.join(COMPILE_BACKENDS)}; got {list(self.compile_backends)}"
            )
        unknown = sorted(set(self.compiled_autograd_backends) - set(COMPILED_AUTOGRAD_BACKENDS))
        if unknown or not self.compiled_autograd_backends:
            raise ConfigError(
                f"compiled_autograd_backends must name some of {', '.join(COMPILED_AUTOGRAD_BACKENDS)}; "
                f"got {list(self.compiled_autograd_backends)}"
            )
        unknown = sorted(set(self.compile_transforms) - set(COMPILE_TRANSFORMS))
        if unknown or not self.compile_transforms:
            raise ConfigError(
                f"compile_transforms must name some of {', '.join(COMPILE_TRANSFORMS)}; "
                f"got {list(self.compile_transforms)}"
            )

    @classmethod
    def resolve(
        cls, environ: Mapping[str, str] | None = None, base: FuzzConfig | None = None, **options: Any
    ) -> FuzzConfig:
        """``base`` (default: the defaults), then ``environ``'s FUZZDIFF_*
        variables, then each of ``options`` that is not None."""
        config = base or cls()
        values: dict[str, Any] = {}
        for name, variable in ENVIRONMENT.items():
            raw = (environ or {}).get(variable, "").strip()
            if raw:
                values[name] = _parse(name, raw, f"${variable}")
        values.update({k: _coerce(k, v) for k, v in options.items() if v is not None})
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise ConfigError(f"unknown setting(s) {unknown}; expected some of {[f.name for f in fields(cls)]}")
        try:
            return replace(config, **values)
        except ConfigError as e:
            raise ConfigError(f"{e} (from {_sources(values, environ)})") from None

    @property
    def example_dir(self) -> Path:
        """The local directory of Hypothesis's example database (fuzzdiff.campaign.database)."""
        return (self.hypothesis_storage or Path(".hypothesis")) / "examples"

    def environ(self) -> dict[str, str]:
        """The variables that rebuild this config (``resolve``) in a process
        started with them, such as a standalone script's."""
        out = {}
        for name, variable in ENVIRONMENT.items():
            value = getattr(self, name)
            if value is None:
                continue
            out[variable] = ",".join(value) if isinstance(value, tuple) else str(value)
        return out


def default_corpus(environ: Mapping[str, str]) -> Path:
    """The corpus a command or a test session uses when none is named:
    $FUZZDIFF_CORPUS, else ./corpus. (Torch-free, for the pytest plugin.)"""
    return FuzzConfig.resolve(environ).corpus or Path("corpus")


# setting -> the environment variable it is read from
ENVIRONMENT = {
    "corpus": "FUZZDIFF_CORPUS",
    "variants": "FUZZDIFF_VARIANTS",
    "structures": "FUZZDIFF_STRUCTURES",
    "timeout": "FUZZDIFF_TIMEOUT",
    "redis_url": "FUZZDIFF_REDIS_URL",
    "compile_backends": "FUZZDIFF_COMPILE_BACKENDS",
    "compile_transforms": "FUZZDIFF_COMPILE_TRANSFORMS",
    "compiled_autograd_backends": "FUZZDIFF_COMPILED_AUTOGRAD_BACKENDS",
    "hypothesis_storage": "HYPOTHESIS_STORAGE_DIRECTORY",  # Hypothesis's own
}


def _parse(name: str, raw: str, where: str) -> Any:
    try:
        if name in ("variants", "structures"):
            return int(raw)
        if name == "timeout":
            return float(raw)
    except ValueError:
        kind = "an integer" if name != "timeout" else "a number of seconds"
        raise ConfigError(f"{where} must be {kind}, got {raw!r}") from None
    return _coerce(name, raw)


_PATHS = ("corpus", "hypothesis_storage", "journal_dir")
_NAMES = ("compile_backends", "compile_transforms", "compiled_autograd_backends", "dtypes")


def _coerce(name: str, value: Any) -> Any:
    if name in _PATHS:
        return Path(value)
    if name in _NAMES and isinstance(value, str):
        return tuple(b.strip() for b in value.split(",") if b.strip())
    if name in _NAMES:
        return tuple(value)
    return value


def _sources(values: Mapping[str, Any], environ: Mapping[str, str] | None) -> str:
    env = [v for k, v in ENVIRONMENT.items() if environ and environ.get(v, "").strip() and k in values]
    return ", ".join(f"${v}" for v in env) or "the options given"
