"""A module's recipe: how a record builds a user's ``nn.Module`` again, in another process.

A module instance has no ``module:qualname`` of its own: it was made by a
constructor with arguments, then trained or loaded into a state. Its recipe
is its class (``module:qualname``), the constructor's arguments, its
parameters and buffers exactly, and which submodules are in training mode.
The arguments are found without the user's help: each parameter of
``__init__`` that the instance keeps as an attribute of the same name
(``self.features = features``), and the children of ``nn.Sequential``,
``nn.ModuleList`` and ``nn.ModuleDict``. Nothing is pickled: an argument is
plain JSON, or tagged (a tuple, a non-finite float, a dtype, a device, a
module, a function or class by ``module:qualname``, or a value its type
builds again from its string form, ``Irreps("1x0e")``).

A recipe is verified before it is stored: a module built from it must have
the same parameters and buffers (names, in order, and shapes) and the same
plain attributes, submodule by submodule; otherwise there is no recipe and
``NoRecipe`` says what is missing.

Building runs the constructors, so whoever builds says which modules may be
imported (fuzzdiff.corpus.repro's import policy, over ``references``); torch's own
module classes and functions need no permission. A class must be an
``nn.Module`` before it is called.
"""

from __future__ import annotations

import inspect
import math
import random
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from fuzzdiff.case.case import DTYPES
from fuzzdiff.errors import FuzzdiffError

__all__ = [
    "NoRecipe",
    "recipe",
    "build",
    "references",
    "trusted",
    "load_module_state",
    "call_module",
    "ModuleFunction",
]

Resolve = Callable[[str], Any]  # module:qualname -> the object (fuzzdiff.targets.user_import.import_object)


class NoRecipe(FuzzdiffError, ValueError):
    """Why a module cannot be built again from what a record can store."""


TRUSTED = "torch"  # names under it import and build torch's own code only


def trusted(ref: str) -> bool:
    """``module:qualname`` names torch's own object: fuzzdiff imports torch anyway."""
    module = ref.partition(":")[0]
    return module == TRUSTED or module.startswith(TRUSTED + ".")


# -- the recipe of an instance ------------------------------------------------------------


def recipe(module: torch.nn.Module, resolve: Resolve) -> dict:
    """``module``'s recipe: ``class``, ``args``, ``kwargs`` (the constructor
    call, nested), ``state`` (name -> tensor, every parameter and buffer),
    ``training`` (submodule name -> mode) and ``frozen`` (parameters that do
    not require grad). NoRecipe where it cannot be found or does not verify."""
    out = constructor(module)
    state = {n: t.detach().cpu().clone() for n, t in _tensors(module)}
    odd = sorted({str(t.dtype) for t in state.values() if t.dtype not in DTYPES.values()})
    if odd:
        raise NoRecipe(f"its state holds {', '.join(odd)} tensors, which a record does not store")
    out.update(
        state=state,
        training={n: m.training for n, m in module.named_modules()},
        frozen=[n for n, p in module.named_parameters() if not p.requires_grad],
    )
    try:
        rebuilt = build(out, resolve)
    except ValueError as e:
        raise NoRecipe(f"{_NOT_THIS_ONE} ({e})") from None
    _verify(module, rebuilt)
    return out


_NOT_THIS_ONE = (
    "a module built from its constructor arguments is not this one: an argument is not kept as it was "
    "passed, or the module was changed after construction"
)


def constructor(module: torch.nn.Module) -> dict:
    """The constructor call that makes a module like ``module``: ``class``,
    ``args``, ``kwargs``, each argument encoded (``encode``)."""
    cls = type(module)
    ref = class_reference(cls)
    init = _init_of(cls)  # a subclass with a constructor of its own is built by it, not as a container
    if isinstance(module, torch.nn.ModuleDict) and init is torch.nn.ModuleDict.__init__:
        return {"class": ref, "args": [encode(OrderedDict(module.items()))], "kwargs": {}}
    if isinstance(module, torch.nn.ModuleList) and init is torch.nn.ModuleList.__init__:
        return {"class": ref, "args": [encode(list(module))], "kwargs": {}}
    if isinstance(module, torch.nn.Sequential) and init is torch.nn.Sequential.__init__:
        names = list(module._modules)
        if names == [str(i) for i in range(len(names))]:
            return {"class": ref, "args": [encode(m) for m in module], "kwargs": {}}
        return {"class": ref, "args": [encode(OrderedDict(module.named_children()))], "kwargs": {}}
    return _from_attributes(module, cls, ref)


def _from_attributes(module: torch.nn.Module, cls: type, ref: str) -> dict:
    """Each ``__init__`` parameter read back from the attribute of its name;
    one with a default that is not kept, or is kept as state (``bias``, a
    tensor), is left at its default, which verification then judges."""
    if _init_of(cls) is torch.nn.Module.__init__:  # no constructor of its own: no arguments
        return {"class": ref, "args": [], "kwargs": {}}
    try:
        params = _parameters(cls)
    except (TypeError, ValueError) as e:
        raise NoRecipe(f"the signature of {cls.__qualname__}'s constructor cannot be read ({e})") from None
    args: list = []
    kwargs: dict = {}
    skipped = None  # a positional-only parameter left at its default: none after it can be given
    for p in params:
        if p.kind is p.VAR_KEYWORD:
            continue
        if p.kind is p.VAR_POSITIONAL:
            raise NoRecipe(f"{cls.__qualname__}'s constructor takes *{p.name}, which the instance does not keep")
        value = _attribute(module, p.name)
        encoded = None if value is _MISSING or isinstance(value, torch.Tensor) else _encoded_or_none(value)
        if encoded is None:
            if p.default is p.empty:
                raise NoRecipe(_unkept(cls, p.name, value))
            skipped = skipped or (p.name if p.kind is p.POSITIONAL_ONLY else None)
            continue
        if p.kind is p.POSITIONAL_ONLY:
            if skipped is not None:
                raise NoRecipe(
                    f"{cls.__qualname__}'s positional-only argument {skipped!r} is not kept, "
                    f"so {p.name!r} after it cannot be passed"
                )
            args.append(encoded[0])
        else:
            kwargs[p.name] = encoded[0]
    return {"class": ref, "args": args, "kwargs": kwargs}


def _parameters(cls: type) -> list[inspect.Parameter]:
    """The constructor's parameters. torch's RNN, LSTM and GRU take ``*args``
    and pass them on to ``RNNBase`` (less its ``mode``; RNN's ``nonlinearity``
    and LSTM's ``proj_size`` are their own), keeping each as an attribute."""
    if cls not in (torch.nn.RNN, torch.nn.LSTM, torch.nn.GRU):
        return list(inspect.signature(cls).parameters.values())
    base = inspect.signature(torch.nn.RNNBase).parameters.values()
    keep = [p for p in base if p.name != "mode" and (cls is torch.nn.LSTM or p.name != "proj_size")]
    if cls is torch.nn.RNN:
        keep.append(inspect.Parameter("nonlinearity", inspect.Parameter.KEYWORD_ONLY, default="tanh"))
    return [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in keep]


def _init_of(cls: type) -> Any:
    """The ``__init__`` that constructing ``cls`` runs, as its MRO finds it."""
    return next(vars(k)["__init__"] for k in cls.__mro__ if "__init__" in vars(k))


def _unkept(cls: type, name: str, value: Any) -> str:
    what = f"constructor argument {name!r} of {cls.__qualname__}"
    if value is _MISSING:
        return f"{what} is not kept as an attribute of the same name (self.{name} = {name})"
    if isinstance(value, torch.Tensor):
        return f"{what} is kept as a tensor (self.{name}), which is state, not the argument"
    return f"{what} is a {type(value).__qualname__}, which a record cannot store ({_why_not(value)})"


_MISSING = object()


def _attribute(module: torch.nn.Module, name: str) -> Any:
    try:
        return getattr(module, name)
    except Exception:  # noqa: BLE001 - a property of the user's that raises: not kept
        return _MISSING


def _tensors(module: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    yield from module.named_parameters()
    yield from module.named_buffers()


def class_reference(obj: Any) -> str:
    """``module:qualname`` that imports back to the class or function ``obj``."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    name = qualname or repr(obj)
    if not module or not qualname or "<" in qualname:
        raise NoRecipe(f"{name} is defined inside a function: define it at module level")
    if module == "__main__":
        raise NoRecipe(f"{name} is defined in __main__, which is another script in another process")
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is not obj:
        raise NoRecipe(f"{module}:{qualname} does not import back to {name}")
    return f"{module}:{qualname}"


# -- arguments as JSON --------------------------------------------------------------------


def encode(value: Any) -> Any:
    """``value`` as JSON, exactly; NoRecipe names what cannot be."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": value.hex()}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.nn.Module):
        return {"module": constructor(value)}
    if isinstance(value, (tuple, torch.Size)) and type(value) in (tuple, torch.Size):
        return {"tuple": [encode(v) for v in value]}
    if type(value) is list:
        return [encode(v) for v in value]
    if type(value) in (dict, OrderedDict) and all(isinstance(k, str) for k in value):
        return {"dict": [[k, encode(v)] for k, v in value.items()]}  # ordered, whatever sorts the JSON
    if inspect.isfunction(value) or inspect.isbuiltin(value) or isinstance(value, type):
        return {"object": class_reference(value)}
    if not isinstance(value, torch.Tensor):
        return _from_string(value)
    raise NoRecipe(_why_not(value))


def _encoded_or_none(value: Any) -> tuple[Any] | None:
    try:
        return (encode(value),)
    except NoRecipe:
        return None


def _from_string(value: Any) -> dict:
    """A value its own type builds again from ``str(value)``."""
    cls = type(value)
    try:
        text = str(value)
        same = cls(text) == value
    except Exception:  # noqa: BLE001 - the user's type: it does not round-trip
        same = False
    if same is not True:
        raise NoRecipe(_why_not(value))
    return {"type": class_reference(cls), "str": text}


def _why_not(value: Any) -> str:
    return f"a {type(value).__qualname__} that is neither JSON nor built again from its string form"


def references(data: Any) -> list[str]:
    """The ``module:qualname`` names building ``data`` (a recipe) imports
    that an import policy must allow, found without importing any: every one
    outside torch, and every type a value is built from a string with
    (``decode`` calls only torch's module classes and functions unasked)."""
    found: list[str] = []

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            for key in ("class", "object", "type"):
                ref = x.get(key)
                if isinstance(ref, str) and (key == "type" or not trusted(ref)) and ref not in found:
                    found.append(ref)
            for k, v in x.items():
                if k != "state":
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(data)
    return found


def decode(data: Any, resolve: Resolve) -> Any:
    """The value ``encode`` stored; ValueError names what is malformed."""
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [decode(v, resolve) for v in data]
    if not isinstance(data, dict) or len(data) != 1 and set(data) != {"type", "str"}:
        raise ValueError(f"an argument {data!r} is not one that a recipe stores")
    if "float" in data:
        return float.fromhex(data["float"])
    if "dtype" in data:
        dtype = getattr(torch, str(data["dtype"]), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"{data['dtype']!r} is not a torch dtype")
        return dtype
    if "device" in data:
        return torch.device(str(data["device"]))
    if "tuple" in data:
        return tuple(decode(v, resolve) for v in data["tuple"])
    if "dict" in data:
        return OrderedDict((str(k), decode(v, resolve)) for k, v in data["dict"])
    if "module" in data:
        return _construct(data["module"], resolve)
    if "object" in data:
        obj = resolve(data["object"])
        if trusted(data["object"]) and not (_is_module_class(obj) or inspect.isfunction(obj) or inspect.isbuiltin(obj)):
            raise ValueError(f"{data['object']} is neither a function nor an nn.Module class of torch's")
        return obj
    if "type" in data:
        cls = resolve(data["type"])
        if not isinstance(cls, type):
            raise ValueError(f"{data['type']} is not a class")
        try:
            return cls(str(data["str"]))
        except Exception as e:  # noqa: BLE001 - the type's error is the recipe's
            raise ValueError(f"building {data['type']} from {data['str']!r} raised {type(e).__name__}: {e}") from None
    raise ValueError(f"an argument {data!r} is not one that a recipe stores")


# -- building -----------------------------------------------------------------------------


def build(data: dict, resolve: Resolve) -> torch.nn.Module:
    """The module ``recipe`` describes: constructed, its state loaded, its
    modes set. The caller's random generators are left as they were
    (constructors draw their initial weights)."""
    with _generators_kept():
        module = _construct(data, resolve)
    state = data.get("state", {})
    want = [n for n, _ in _tensors(module)]
    if sorted(want) != sorted(state):
        raise ValueError(f"the module built has parameters and buffers {want}; the recipe's state has {sorted(state)}")
    for name, t in _tensors(module):
        if tuple(t.shape) != tuple(state[name].shape):
            raise ValueError(
                f"{name} has shape {tuple(t.shape)} in the module built, {tuple(state[name].shape)} stored"
            )
    modes = data.get("training", {})
    unknown = set(modes) - {n for n, _ in module.named_modules()}
    if unknown:
        raise ValueError(f"the recipe sets the mode of submodules {sorted(unknown)}, which the module built lacks")
    load_module_state(module, state, modes, list(data.get("frozen", [])))
    return module


def _construct(data: Any, resolve: Resolve) -> torch.nn.Module:
    if not isinstance(data, dict) or not isinstance(data.get("class"), str):
        raise ValueError("a module's recipe needs a string 'class' (module:qualname)")
    cls = resolve(data["class"])
    if not _is_module_class(cls):
        raise ValueError(f"{data['class']} is not an nn.Module class")  # never called, then
    args, kwargs = data.get("args", []), data.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise ValueError(f"the recipe of {data['class']} needs a list 'args' and an object 'kwargs'")
    positional, named = [decode(a, resolve) for a in args], {k: decode(v, resolve) for k, v in kwargs.items()}
    try:
        return cls(*positional, **named)
    except Exception as e:  # noqa: BLE001 - the constructor's error is the recipe's
        raise ValueError(f"building {data['class']} raised {type(e).__name__}: {e}") from None


def _is_module_class(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, torch.nn.Module)


@contextmanager
def _generators_kept() -> Iterator[None]:
    python, numpy = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy)


def _verify(module: torch.nn.Module, rebuilt: torch.nn.Module) -> None:
    """NoRecipe unless ``rebuilt`` is ``module`` again: the same tensors in
    the same order, and the same plain attributes in each submodule."""
    ours, theirs = (
        [(n, tuple(t.shape)) for n, t in _tensors(module)],
        [(n, tuple(t.shape)) for n, t in _tensors(rebuilt)],
    )
    if ours != theirs:
        raise NoRecipe(f"{_NOT_THIS_ONE} ({_first_difference(ours, theirs)})")
    for (name, mine), (_, other) in zip(module.named_modules(), rebuilt.named_modules()):
        where = f"{name}." if name else ""
        for key in sorted(set(vars(mine)) | set(vars(other))):
            if key.startswith("_") or key == "training":
                continue
            if not _same(vars(mine).get(key, _MISSING), vars(other).get(key, _MISSING)):
                raise NoRecipe(f"{_NOT_THIS_ONE} (attribute {where}{key} differs)")


def _first_difference(ours: list, theirs: list) -> str:
    for a, b in zip(ours, theirs):
        if a != b:
            return f"{a[0]} {list(a[1])} here, {b[0]} {list(b[1])} there"
    longer, which = (ours, "here") if len(ours) > len(theirs) else (theirs, "there")
    extra = longer[min(len(ours), len(theirs))]
    return f"{extra[0]} {list(extra[1])} only {which}"


def _same(a: Any, b: Any) -> bool:
    if a is _MISSING or b is _MISSING:
        return a is b
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and bool(torch.equal(a.detach().cpu(), b.detach().cpu()) or a.numel() == 0)
        )
    mine, other = _encoded_or_none(a), _encoded_or_none(b)
    return mine == other if mine is not None or other is not None else True


# -- torch-only: copied by source into standalone scripts ---------------------------------


def load_module_state(module, state, training, frozen):
    """Give ``module`` the stored parameters and buffers, bit for bit, its
    submodules' modes, and requires_grad. Each tensor is filled in place
    (``.data``): parameters tied to each other stay tied."""
    with torch.no_grad():
        for name, value in state.items():
            owner, _, leaf = name.rpartition(".")
            sub = module.get_submodule(owner)
            held = sub._parameters[leaf] if leaf in sub._parameters else sub._buffers[leaf]
            held.data = value.clone()
    for name, p in module.named_parameters():
        p.requires_grad_(name not in frozen)
    for name, m in module.named_modules():
        m.training = training.get(name, m.training)


def call_module(module, parameters, *args):
    """``module`` as a function of its inputs, then of its ``parameters``
    (names) (``torch.func.functional_call``). Buffers are copied per call in
    the parameters' dtype, so running statistics never carry over between calls."""
    n = len(parameters)
    inputs, params = args[: len(args) - n], args[len(args) - n :]
    dtype = params[0].dtype if params else inputs[0].dtype
    buffers = {k: b.to(dtype, copy=True) if b.is_floating_point() else b.clone() for k, b in module.named_buffers()}
    return torch.func.functional_call(module, {**buffers, **dict(zip(parameters, params))}, tuple(inputs))


@dataclass(frozen=True, eq=False)
class ModuleFunction:
    """A module as the function the checks differentiate: of its inputs, then
    of the ``parameters`` that require grad (``call_module``). ``recipe``, once
    a record rebuilt it, is what a standalone script builds it from."""

    module: torch.nn.Module
    parameters: tuple[str, ...]
    recipe: dict | None = None

    def __call__(self, *args):
        return call_module(self.module, self.parameters, *args)

    def with_recipe(self, data: dict) -> ModuleFunction:
        return replace(self, recipe=data)
