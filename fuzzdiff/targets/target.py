"""A Target: what can be fuzzed, described as data (like PyTorch's OpInfo).

Everything that differs between ops — shapes, value domains, dtypes, kinks,
which checks apply, tolerance overrides — is a field here, so that checks and
strategies never need an if-chain per op.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from fuzzdiff.case.arguments import ArgKind, FromShapes, Index, Mask, NoGrad
from fuzzdiff.case.spec import ArgSpec, parse_spec
from fuzzdiff.case.structures import STRUCTURES
from fuzzdiff.errors import FuzzdiffError
from fuzzdiff.targets.implicit import Implicit
from fuzzdiff.targets.known import Known
from fuzzdiff.targets.role import OpInfoRole

__all__ = ["Target", "Tol", "Only", "TargetUnavailable", "Index", "Mask", "NoGrad", "FromShapes", "ArgKind"]

FLOATING = (torch.float64, torch.float32)


class TargetUnavailable(FuzzdiffError, KeyError):
    """A target that a name or a record names and this process cannot build:
    an OpInfo missing from this torch's op_db, a stored call no longer valid."""

    def __str__(self) -> str:
        return self.args[0]


@dataclass(frozen=True)
class Tol:
    """A tolerance override for one check; ``reason`` is required, so it is reviewed."""

    atol: float
    rtol: float
    reason: str

    def __post_init__(self) -> None:
        if not self.reason.strip():
            raise ValueError("a tolerance override needs a reason")


@dataclass(frozen=True)
class Only:
    """An allow-list: the only checks that may apply to a target, and why no
    other does. Names, not check objects, so that targets never import the
    checks; ``fuzzdiff.checks.validate`` holds them against the registry."""

    checks: tuple[str, ...]
    reason: str

    def __post_init__(self) -> None:
        if not self.checks or not self.reason.strip():
            raise ValueError("Only needs at least one check and a reason")


# Catalog families whose functions are not torch's: another library's code.
LIBRARIES = ("tensorly",)


@dataclass(frozen=True)
class Target:
    """One fuzz target.

    domain:    per argument, a value interval ``(low, high)``; None is unbounded.
    sample:    per argument, the interval values are drawn from, when it should be
               narrower than the domain (e.g. away from where a derivative blows up).
    kinks:     points where the function is not differentiable; values keep away.
    distinct:  ties are kinks (max, sort, median): values are spread apart.
    only:      an allow-list of the checks that may apply (Only), when most do not.
    skip:      check name -> why it does not apply to this target.
    known:     the PyTorch discrepancies it is known to hit, each a precise
               signature with its evidence (fuzzdiff.targets.known), never a whole check.
    functional: False for targets that mutate their inputs.
    specials:  opt in to special values (±0, ±inf, nan, tiny, huge, subnormal).
    random:    the target draws random numbers (dropout, a module in training
               mode): the checks call it with torch's generators and Python's
               ``random`` seeded alike before every call (fuzzdiff.search.runner), or
               seed it themselves (checkpoint); vmap and compile do not apply.
    structured: the structured points that are valid inputs, drawn for every
               floating argument (fuzzdiff.case.structures): "ties", "zeros",
               "identity", "diagonal", "repeated_singular", "large", "offset".
               Only where the target is defined there: its derivative may be
               a kink (a tie of max), which confirmation tells from a wrong
               formula at a smooth point (a zero of prod).
    origin:    ``module:qualname`` that resolves to this Target, for one that is
               not in the catalog: cases (and corpus records) name it, so they replay.
    cpu_only:  why the target's cases stay on the CPU, e.g. a CUDA kernel fault
               that breaks the process's CUDA context, which no check can report.
    module:    for a module target, ``module(*sample, **kwargs) -> nn.Module``
               builds its module for one sample's shapes and dtype; ``fn`` is then
               that module on a batch of one (fuzzdiff.targets.module).
    cross_backend: ``cross_backend(name)`` -> the same function on another
               backend (tensorly's numpy), for the backend check.
    invalid:   torch's refusals of an input outside the target's domain, as
               (exception type name, message regex): an eager call that raises
               one rejects the example instead of failing it (e.g. an in-place
               write into memory that another operand overlaps).
    decline:   for a target of torch's OpInfo database, ``decline(check, role)``
               -> why a check with that OpInfo role (fuzzdiff.targets.role) does
               not apply to its op, or None; ask it through ``declines``.
    implicit:  the target's output is a sample torch differentiates implicitly,
               holding its CDF fixed (fuzzdiff.targets.implicit): how to get
               its CDF and density, for the implicit_rsample check.
    op:        for a target of torch's that calls one torch function or module
               through a wrapper (an OpInfo sample), that function's name: what
               a failure of the target names (``torch_function``).
    """

    name: str
    fn: Callable[..., Any]
    spec: str
    family: str = "misc"
    domain: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)
    sample: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    dtypes: tuple[torch.dtype, ...] = FLOATING
    kinds: Mapping[str, ArgKind] = field(default_factory=dict)
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    kinks: tuple[float, ...] = ()
    distinct: bool = False
    only: Only | None = None
    skip: Mapping[str, str] = field(default_factory=dict)
    known: tuple[Known, ...] = ()
    tolerances: Mapping[str, Tol] = field(default_factory=dict)
    functional: bool = True
    specials: bool | tuple[str, ...] = False
    structured: tuple[str, ...] = ()
    min_side: int = 0
    max_side: int = 4
    max_rank: int = 4
    random: bool = False
    origin: str | None = None
    cpu_only: str | None = None
    invalid: tuple[tuple[str, str], ...] = ()
    module: Callable[..., Any] | None = None
    cross_backend: Callable[[str], Callable[..., Any]] | None = None
    decline: Callable[[str, OpInfoRole | None], str | None] | None = None
    implicit: Implicit | None = None
    op: str | None = None

    def __post_init__(self) -> None:
        names = {a.name for a in self.args}
        for what in ("domain", "sample", "kinds"):
            unknown = set(getattr(self, what)) - names
            if unknown:
                raise ValueError(
                    f"target {self.name!r}: {what} names unknown argument(s) "
                    f"{sorted(unknown)}; the spec has {sorted(names)}"
                )
        if not all(isinstance(k, Known) for k in self.known):
            raise ValueError(
                f"target {self.name!r}: known must be a tuple of fuzzdiff.targets.known.Known signatures, got "
                f"{self.known!r}"
            )
        if isinstance(self.structured, str) or not set(self.structured) <= set(STRUCTURES):
            raise ValueError(
                f"target {self.name!r}: structured must be a tuple of names from {STRUCTURES}, got {self.structured!r}"
            )
        for k, v in self.kinds.items():
            if isinstance(v, Index) and all(v.dim != d.name for a in self.args for d in a.dims):
                raise ValueError(f"target {self.name!r}: Index({v.dim!r}) for {k!r} names no dim of the spec")

    @property
    def args(self) -> tuple[ArgSpec, ...]:
        return parse_spec(self.spec)

    @property
    def devices(self) -> tuple[str, ...]:
        """The devices its cases may be on (where torch has them)."""
        return ("cpu",) if self.cpu_only else ("cpu", "cuda")

    @property
    def torch_function(self) -> str | None:
        """The torch function this target is, by name (``torch.nn.functional.huber_loss``):
        ``op``, or the function itself where it is one of torch's overridable functions."""
        if self.op is not None:
            return self.op
        try:
            return torch.overrides.resolve_name(self.fn)
        except TypeError:  # an unhashable callable
            return None

    @property
    def torchs_own(self) -> bool:
        """Whether this is torch's own code: an OpInfo or ModuleInfo sample, or a
        catalog target of torch ops (registered by name, with no ``origin``
        elsewhere), not a user's function or another library's."""
        return self.family == "opinfo" or (self.origin is None and self.family not in ("user", "selftest", *LIBRARIES))

    @property
    def ref(self) -> str:
        """What a case calls this target: ``fuzzdiff.targets.get_target(ref)`` finds it."""
        return self.origin or self.name

    def rejects(self, error: BaseException) -> bool:
        """``error`` says the input is outside the domain (``invalid``)."""
        text = str(error)
        return any(type(error).__name__ == kind and re.search(pattern, text) for kind, pattern in self.invalid)

    def check_names(self) -> set[str]:
        """Every check name the target mentions (allow-list, skips, known
        discrepancies, tolerances), for validation against the registry."""
        names = set(self.skip) | set(self.tolerances) | self.known_checks()
        return names | set(self.only.checks) if self.only else names

    def known_checks(self) -> frozenset[str]:
        """The checks some known discrepancy of this target can be reported by."""
        return frozenset(c for k in self.known for c in k.checks)

    def declines(self, check: str, role: OpInfoRole | None) -> str | None:
        """Why ``check``, whose OpInfo role is ``role`` (None: it has none), does
        not apply as this target's kind sees it: an OpInfo op's flags and
        skipped tests (``decline``). None for every other target."""
        return None if self.decline is None else self.decline(check, role)

    def build_module(self, *sample: Any, **kwargs: Any) -> Any:
        """A module target's module for one sample's shapes and dtype (``module``)."""
        if self.module is None:
            raise TypeError(f"target {self.name!r} is not a module target: it has no module builder")
        return self.module(*sample, **kwargs)

    def differentiable(self, arg: str) -> bool:
        return arg not in self.kinds

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)
