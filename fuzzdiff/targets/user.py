"""The user's own code as targets: a function, autograd.Function, custom op or
module (``user_target``), named ``module:qualname`` so that a record of it
replays, and the definition a corpus record stores to build it again
(``definition``, ``from_definition``). Importing the user's code, and whether a
record may: fuzzdiff.targets.user_import."""

from __future__ import annotations

import copy
import inspect
import sys
import typing
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from fuzzdiff.case.case import DTYPES
from fuzzdiff.case.spec import parse_spec
from fuzzdiff.targets.discrepancies import MACHINERY, NESTED_JVP_FUNCTION
from fuzzdiff.targets.module import one_sample
from fuzzdiff.targets.randomness import seeded_alike
from fuzzdiff.targets.recipe import ModuleFunction, NoRecipe, build, recipe
from fuzzdiff.targets.target import Target, Tol
from fuzzdiff.targets.user_import import import_object

__all__ = [
    "resolve_user_target",
    "reference",
    "spec_from_annotations",
    "user_target",
    "definition",
    "from_definition",
    "module_definition",
    "UNREPLAYABLE",
    "importable",
    "SOURCE_FIELDS",
]


def resolve_user_target(ref: str) -> Target:
    obj = import_object(ref)
    if isinstance(obj, Target):
        return obj
    raise ValueError(
        f"{ref!r} is a {type(obj).__name__}, not a fuzzdiff Target; "
        "wrap it with fuzzdiff.Target(name, fn, spec) to say its shapes"
    )


def reference(fn) -> str | None:
    """``module:qualname`` that imports back to ``fn``, or None when nothing does.

    Replay in another process needs it: a corpus record names its function so.
    """
    owner = getattr(fn, "__self__", None)  # autograd.Function.apply is bound to its class
    candidates = []
    if isinstance(owner, type) and getattr(fn, "__name__", None):
        candidates.append(f"{owner.__module__}:{owner.__qualname__}.{fn.__name__}")
    defined = getattr(fn, "_init_fn", fn)  # a torch.library.custom_op: where its function lives
    module, qualname = getattr(defined, "__module__", None), getattr(fn, "__qualname__", None)
    if module and qualname and "<" not in qualname:
        candidates.append(f"{module}:{qualname}")
    if module in sys.modules:  # e.g. a custom op object bound to a module-level name
        candidates += [f"{module}:{k}" for k, v in vars(sys.modules[module]).items() if v is fn]
    for ref in candidates:
        try:
            if import_object(ref) == fn:
                return ref
        except ValueError:
            continue
    return None


def spec_from_annotations(fn) -> str:
    """The shape spec written as jaxtyping annotations on ``fn``'s tensor parameters."""
    target = getattr(fn, "_init_fn", fn)  # torch.library.custom_op keeps the Python function here
    try:
        hints = typing.get_type_hints(target)
        params = inspect.signature(target).parameters
    except (TypeError, ValueError, NameError) as e:
        raise ValueError(f"no spec given and the annotations of {fn!r} cannot be read: {e}") from None
    entries = [
        f"{name}: {hints[name].dim_str}"
        for name in params
        if name in hints and isinstance(getattr(hints[name], "dim_str", None), str)
    ]
    if not entries:
        raise ValueError(
            f"no spec given and {getattr(fn, '__qualname__', fn)!r} has no jaxtyping "
            "annotations (e.g. x: Float[Tensor, 'n m']); pass a spec such as \"x: n m\""
        )
    return ", ".join(entries)


def module_function(module, spec: str):
    """``module`` as a function of its inputs, then of its parameters, and the spec of both.

    Every check then differentiates with respect to the weights too
    (``torch.func.functional_call``). Buffers are copied per call in the
    inputs' dtype, so running statistics never carry over between examples.
    """
    names = [n for n, p in module.named_parameters() if p.requires_grad]
    params = dict(module.named_parameters())
    entries = [f"{'p_' + n.replace('.', '_')}: {' '.join(map(str, params[n].shape))}".rstrip() for n in names]
    return ModuleFunction(module, tuple(names)), ", ".join([spec, *entries])


def _random_layers(module) -> list[str]:
    """The submodules that draw random numbers as they are (dropout, RReLU in training mode)."""
    return [
        n or type(m).__name__
        for n, m in module.named_modules()
        if m.training
        and (isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 or isinstance(m, torch.nn.RReLU))
    ]


def per_sample_target(target: Target, module) -> Target:
    """The per_sample check's view of a user's module: one sample's shapes (the
    spec's leading batch dim dropped) and a builder for the module, as the
    catalog's module targets have (fuzzdiff.paths.expanded)."""

    inputs = [a for a in parse_spec(target.spec) if not a.name.startswith("p_")]
    leading = {
        a.dims[0].name if a.dims and a.dims[0].kind == "name" and not a.dims[0].variadic else None for a in inputs
    }
    if len(leading) != 1 or None in leading:
        raise ValueError(
            f"per_sample needs every input of {target.name!r} to start with the same named "
            f'batch dim (e.g. "x: b 3, y: b"); the spec is {target.spec!r}'
        )
    sample_spec = ", ".join(f"{a.name}: {' '.join(map(str, a.dims[1:]))}".rstrip() for a in inputs)

    def build(*sample, **kwargs):
        return copy.deepcopy(module).to(sample[0].dtype)

    copies: dict[torch.dtype, torch.nn.Module] = {}

    def on_one_sample(*sample):
        """The module, in the sample's dtype, on a batch of it: the plain call of a per_sample case."""
        dtype = sample[0].dtype
        if dtype not in copies:
            copies[dtype] = build(*sample)
        return one_sample(copies[dtype], *sample)

    return Target(
        target.name,
        on_one_sample,
        sample_spec,
        family="user",
        dtypes=target.dtypes,
        domain={k: v for k, v in target.domain.items() if not k.startswith("p_")},
        module=build,
        random=target.random,
        skip=target.skip,
    )


def user_target(
    fn: Callable[..., Any],
    spec: str | None = None,
    *,
    dtypes: Iterable[torch.dtype] | None = None,
    domain: Mapping[str, tuple[float | None, float | None]] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    sizes: tuple[int, int] | None = None,
) -> Target:
    """A Target for the user's own callable, named so that records of it replay.

    ``sizes`` is ``(smallest, largest)`` for every drawn dim (default 0 to 4;
    a spec's own bounds such as ``n>=1`` narrow it per name). A spec that
    cannot fit the function's signature is a ValueError, before any fuzzing.
    """
    if isinstance(fn, Target):
        return fn
    if not callable(fn):
        raise TypeError(f"expected a callable (function, autograd.Function.apply, custom op, module), got {fn!r}")
    spec = spec_from_annotations(fn.forward if isinstance(fn, torch.nn.Module) else fn) if spec is None else spec
    ref = reference(fn)
    call = fn
    if isinstance(fn, torch.nn.Module):
        _check_arity(fn.forward, spec, kwargs or {})
        call, spec = module_function(fn, spec)
    else:
        _check_arity(fn, spec, kwargs or {})
    options: dict = {} if dtypes is None else {"dtypes": tuple(dtypes)}
    if sizes is not None:
        low, high = sizes
        if not (isinstance(low, int) and isinstance(high, int) and 0 <= low <= high):
            raise ValueError(f"sizes must be (smallest, largest) with 0 <= smallest <= largest, got {sizes!r}")
        options.update(min_side=low, max_side=high)
    qualname: str = getattr(fn, "__qualname__", type(fn).__name__)
    target = Target(
        ref or qualname,
        call,
        spec,
        family="user",
        domain=dict(domain or {}),
        kwargs=dict(kwargs or {}),
        # user code is where custom autograd.Functions are; the compiling
        # machinery's bugs meet any code under its transforms and export
        known=(NESTED_JVP_FUNCTION, *MACHINERY),
        **options,
    )
    if isinstance(fn, torch.nn.Module) and _random_layers(fn):
        return seeded_alike(target)
    return target


def _check_arity(fn, spec: str, kwargs) -> None:
    """The spec names one tensor per positional argument: their number must fit
    the function's signature, where Python can read one (``apply`` and C
    functions take ``*args``: nothing to check)."""

    target = getattr(fn, "_init_fn", fn)  # torch.library.custom_op keeps the Python function here
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in kwargs]
    required = [p for p in positional if p.default is p.empty]
    n = len(parse_spec(spec))
    if not len(required) <= n <= len(positional):
        want = f"{len(required)}" if len(required) == len(positional) else f"{len(required)} to {len(positional)}"
        raise ValueError(
            f"the spec {spec!r} names {n} tensor argument(s), but "
            f"{getattr(target, '__qualname__', target)}{inspect.signature(target)} takes {want} "
            "positional argument(s)" + (f" besides kwargs {sorted(kwargs)}" if kwargs else "")
        )


SOURCE_FIELDS = ("imports", "setup", "definitions", "call")
UNREPLAYABLE = "unreplayable"  # a definition's field: why the target cannot be built again


def importable(target: Target) -> bool:
    """Whether ``target.name`` imports back to its function in a fresh process
    (``module:qualname``, and not ``__main__``, which is another script there)."""
    return target.family == "user" and ":" in target.name and not target.name.startswith("__main__:")


def definition(target: Target, source: dict | None = None) -> dict | None:
    """What a corpus record stores to rebuild a user target; None if it cannot.

    A function that does not import back (a lambda, a local function, one
    defined in ``__main__``) is stored by its ``source``: the self-contained
    code fuzzdiff.script.source writes for scripts (its fields SOURCE_FIELDS).
    """
    if target.family != "user" or not (importable(target) or source is not None):
        return None
    out = _described(target)
    if not importable(target):
        assert source is not None  # else returned None above
        out["source"] = {k: source[k] for k in SOURCE_FIELDS}
    return out


def _described(target: Target) -> dict:
    """What every definition holds: the name, spec, domain, dtypes and flags."""
    out = {
        "fn": target.name,
        "spec": target.spec,
        "domain": {k: list(v) for k, v in target.domain.items()},
        "dtypes": [str(d).removeprefix("torch.") for d in target.dtypes],
        "functional": target.functional,
    }
    if target.random:
        out["random"] = True  # every call seeded alike (fuzzdiff.targets.randomness)
    if target.tolerances:  # declared by the caller: a replay judges by them too
        out["tolerances"] = {
            k: {"atol": t.atol, "rtol": t.rtol, "reason": t.reason} for k, t in target.tolerances.items()
        }
    return out


def _from_source(source, trust_source: bool):
    """The function a record's stored source defines: its code runs, so only
    when the caller says it has read it (``trust_source``)."""
    if not isinstance(source, dict) or not all(
        isinstance(source.get(k), str if k == "call" else list) for k in SOURCE_FIELDS
    ):
        raise ValueError("field 'definition.source' needs lists 'imports', 'setup', 'definitions' and a string 'call'")
    if not trust_source:
        raise ValueError(
            "the record carries its function's source code (a lambda, a local or a __main__ "
            "function): read it (fuzzdiff corpus show ID), then replay with --trust-source"
        )
    namespace: dict = {"__name__": "fuzzdiff_record_source"}
    exec("\n".join([*source["imports"], *source["setup"], *source["definitions"]]), namespace)  # noqa: S102
    fn = eval(source["call"], namespace)  # noqa: S307 - the caller trusts this source

    def call(*args, **kwargs):
        return fn(*args, **kwargs)

    # the script generator writes this source, not the wrapper (a function attribute, read by getattr)
    call.fuzzdiff_source = source  # type: ignore[attr-defined]
    return call


def module_definition(target: Target, module: torch.nn.Module) -> dict | None:
    """``definition`` of a module's target: its recipe (fuzzdiff.targets.recipe)
    besides the spec of its inputs. Where the module cannot be built again in
    another process, a warning says what is missing, and so does the
    definition (``UNREPLAYABLE``), for the replay's error."""
    try:
        data = recipe(module, import_object)
    except NoRecipe as e:
        why = (
            f"records of module {target.name!r} will not replay in another process: {e}. "
            "A record builds a module again from its class, defined at module level of an importable "
            "module, and the constructor arguments the instance keeps as attributes of the same name "
            "(self.features = features); a module that cannot be so can be wrapped in one that is"
        )
        warnings.warn(f"fuzzdiff: {why}", stacklevel=4)  # the caller of fuzzdiff.check
        return {**_described(target), UNREPLAYABLE: why}
    n_inputs = len(target.args) - sum(p.requires_grad for _, p in module.named_parameters())
    data["inputs"] = ", ".join(str(a) for a in target.args[:n_inputs])
    return {**_described(target), "module": data}


def _from_recipe(data, spec: str) -> ModuleFunction:
    """The function of a record's module, built from its recipe; its spec must be the record's."""
    if not isinstance(data, dict) or not isinstance(data.get("inputs"), str):
        raise ValueError("field 'definition.module' needs a string 'inputs' (the spec of the module's inputs)")
    module = build(data, import_object)  # what it imports: fuzzdiff.corpus.repro's policy
    fn, rebuilt = module_function(module, data["inputs"])
    if parse_spec(rebuilt) != parse_spec(spec):  # one spec however written (a shared dim's bound at one use or all)
        raise ValueError(f"the module built has the spec {rebuilt!r}; the record's is {spec!r}")
    return fn.with_recipe(data)


def from_definition(data, *, trust_source: bool = False) -> Target:
    """The inverse of ``definition``, validated; ValueError names the bad field.
    Code stored in the record runs only with ``trust_source``."""
    if not isinstance(data, dict) or not isinstance(data.get("fn"), str) or not isinstance(data.get("spec"), str):
        raise ValueError("field 'definition' needs string fields 'fn' and 'spec'")
    if UNREPLAYABLE in data:
        raise ValueError(str(data[UNREPLAYABLE]))
    if "module" in data:
        fn = _from_recipe(data["module"], data["spec"])
    else:
        fn = _from_source(data["source"], trust_source) if "source" in data else import_object(data["fn"])
    domain = data.get("domain", {})
    if not isinstance(domain, dict) or not all(isinstance(v, list) and len(v) == 2 for v in domain.values()):
        raise ValueError("field 'definition.domain' must map argument names to [low, high]")
    unknown = [d for d in data.get("dtypes", []) if d not in DTYPES]
    if unknown:
        raise ValueError(f"field 'definition.dtypes' has unknown dtype(s) {unknown}")
    dtypes = tuple(DTYPES[d] for d in data.get("dtypes", ["float64", "float32"]))
    tolerances = data.get("tolerances", {})
    if not isinstance(tolerances, dict) or not all(
        isinstance(t, dict) and all(isinstance(t.get(k), (int, float)) for k in ("atol", "rtol"))
        for t in tolerances.values()
    ):
        raise ValueError("field 'definition.tolerances' must map check names to {atol, rtol, reason}")
    target = Target(
        data["fn"],
        fn,
        data["spec"],
        family="user",
        dtypes=dtypes,
        domain={k: tuple(v) for k, v in domain.items()},
        functional=bool(data.get("functional", True)),
        tolerances={
            k: Tol(float(t["atol"]), float(t["rtol"]), str(t.get("reason") or "declared"))
            for k, t in tolerances.items()
        },
    )
    return seeded_alike(target) if data.get("random") is True else target
