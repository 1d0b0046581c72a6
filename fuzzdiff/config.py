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
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from fuzzdiff.errors import FuzzdiffError

__all__ = ["FuzzConfig", "ConfigError", "ENVIRONMENT", "COMPILE_BACKENDS", "COMPILE_TRANSFORMS", "default_corpus"]

# torch.compile backends and aot_function partitioners the compile check draws from
COMPILE_BACKENDS = ("aot_function", "aot_function_min_cut", "aot_eager", "inductor")
# what the compile check compiles besides f itself ("none"): torch.func transforms of f,
# and f at dual inputs (fuzzdiff.paths.compiled)
COMPILE_TRANSFORMS = ("none", "grad", "vjp", "jvp", "vmap", "dual")


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
    hypothesis_storage: Hypothesis's storage directory (None: its default,
                      ./.hypothesis), as this process's Hypothesis finds it: a
                      campaign worker, maybe on another machine, is told it.
    """

    corpus: Path | None = None
    variants: int = 16
    structures: int = 8
    timeout: float = 60.0
    redis_url: str | None = None
    compile_backends: tuple[str, ...] = COMPILE_BACKENDS
    compile_transforms: tuple[str, ...] = COMPILE_TRANSFORMS
    hypothesis_storage: Path | None = None

    def __post_init__(self) -> None:
        for name in ("variants", "structures"):
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


def _coerce(name: str, value: Any) -> Any:
    if name in ("corpus", "hypothesis_storage"):
        return Path(value)
    if name in ("compile_backends", "compile_transforms") and isinstance(value, str):
        return tuple(b.strip() for b in value.split(",") if b.strip())
    if name in ("compile_backends", "compile_transforms"):
        return tuple(value)
    return value


def _sources(values: Mapping[str, Any], environ: Mapping[str, str] | None) -> str:
    env = [v for k, v in ENVIRONMENT.items() if environ and environ.get(v, "").strip() and k in values]
    return ", ".join(f"${v}" for v in env) or "the options given"
