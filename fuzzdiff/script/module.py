"""A user's module in a standalone script, built as its record's recipe builds it.

The script constructs the module from its class and constructor arguments
(fuzzdiff.targets.recipe), gives it the stored parameters and buffers bit for
bit and its submodules' modes, and calls it as the checks did: a function of
its inputs, then of its parameters (``call_module``, copied, as is
``load_module_state``). The user's classes are copied by source where they
can be; a class of an installed package (or one that cannot be copied) is
imported, and the script says so.
"""

from __future__ import annotations

from typing import Any

import torch

from fuzzdiff.script.literals import ScriptError, tensor_literal, value_literal
from fuzzdiff.script.source import SPECIAL, TargetCode, objects_code
from fuzzdiff.targets.recipe import ModuleFunction, call_module, load_module_state
from fuzzdiff.targets.user_import import import_object, is_installed

__all__ = ["module_code", "NAMES"]

# The module-level names the module's code binds besides the user's classes.
NAMES = frozenset(
    {"MODULE", "MODULE_STATE", "MODULE_TRAINING", "MODULE_FROZEN", "MODULE_PARAMETERS", "module_under_test"}
)


class _Needed:
    """The objects a recipe's constructor calls name, and how the script writes each."""

    def __init__(self) -> None:
        self.copied: list[Any] = []  # user code: copied by source, under its own name
        self.imported: dict[str, str] = {}  # script name -> import line
        self.needs: set[str] = set()  # third-party packages imported
        self.notes: list[str] = []

    def name(self, ref: str) -> str:
        """The script's expression for the object ``ref`` (``module:qualname``) names."""
        obj = import_object(ref)  # loaded already: the record's target was built from it
        public = _torch_name(obj)
        if public is not None:
            return public
        module, _, qualname = ref.partition(":")
        top = qualname.split(".")[0]
        if "." not in qualname and not is_installed(obj):
            if obj not in self.copied:
                self.copied.append(obj)
            return qualname
        self.imported[top] = f"from {module} import {top}"
        root = module.split(".")[0]
        if root != "torch":
            self.needs.add(root)
        return qualname


def _torch_name(obj: Any) -> str | None:
    """torch's public name of one of its objects, as a script writes it."""
    module = getattr(obj, "__module__", "") or ""
    if not (module == "torch" or module.startswith("torch.")):
        return None
    name = str(getattr(obj, "__name__", ""))
    for prefix, namespace in (("torch.nn", torch.nn), ("torch.nn.functional", torch.nn.functional), ("torch", torch)):
        if name and getattr(namespace, name, None) is obj:
            return f"{prefix}.{name}"
    return f"{module}.{obj.__qualname__}"


def _expression(data: Any, needed: _Needed) -> str:
    """Python source for an argument the recipe stores (fuzzdiff.targets.recipe.encode)."""
    if data is None or isinstance(data, (bool, int, float, str)):
        return value_literal(data)
    if isinstance(data, list):
        return "[" + ", ".join(_expression(v, needed) for v in data) + "]"
    if "float" in data:
        return value_literal(float.fromhex(data["float"]))
    if "dtype" in data:
        return f"torch.{data['dtype']}"
    if "device" in data:
        return f"torch.device({data['device']!r})"
    if "tuple" in data:
        items = [_expression(v, needed) for v in data["tuple"]]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if "dict" in data:
        needed.imported["OrderedDict"] = "from collections import OrderedDict"
        pairs = ", ".join(f"({value_literal(k)}, {_expression(v, needed)})" for k, v in data["dict"])
        return f"OrderedDict([{pairs}])"
    if "module" in data:
        return _constructor(data["module"], needed)
    if "object" in data:
        return needed.name(data["object"])
    if "type" in data:
        return f"{needed.name(data['type'])}({data['str']!r})"
    raise ScriptError(f"an argument {data!r} is not one that a recipe stores")


def _constructor(data: dict, needed: _Needed) -> str:
    args = [_expression(a, needed) for a in data.get("args", [])]
    args += [f"{k}={_expression(v, needed)}" for k, v in data.get("kwargs", {}).items()]
    return f"{needed.name(data['class'])}({', '.join(args)})"


def _state_block(fn: ModuleFunction) -> list[str]:
    recipe = fn.recipe or {}
    state = "".join(f"    {k!r}: {tensor_literal(t, indent='    ')},\n" for k, t in recipe.get("state", {}).items())
    return [
        "# The module's parameters and buffers, bit for bit, and its submodules' modes",
        f"MODULE_STATE = {{\n{state}}}",
        f"MODULE_TRAINING = {value_literal(dict(recipe.get('training', {})))}",
        f"MODULE_FROZEN = {value_literal(list(recipe.get('frozen', [])))}",
        f"# The parameters the checks differentiate, passed after the inputs\nMODULE_PARAMETERS = {fn.parameters!r}",
    ]


def module_code(fn, kwargs, arg_names) -> TargetCode | None:
    """The code of a module target rebuilt from a record's recipe; None for any other function."""
    if not isinstance(fn, ModuleFunction):
        return None
    if fn.recipe is None:
        raise ScriptError("the module has no recipe to build it from (its record's definition carries none)")
    needed = _Needed()
    build = _constructor(fn.recipe, needed)
    name = fn.recipe["class"].partition(":")[2]
    note = ""
    try:
        code = objects_code([*needed.copied, load_module_state, call_module], f"module {name}")
    except ScriptError as e:  # user code that cannot be copied is imported
        for obj in needed.copied:
            needed.imported[obj.__name__] = f"from {obj.__module__} import {obj.__name__}"
        code = objects_code([load_module_state, call_module], f"module {name}")
        note = f" ({e})"
    clash = code.names & (NAMES | set(needed.imported))
    if clash:
        raise ScriptError(f"the module's code defines {sorted(clash)}, which the script uses for itself")
    code.imports += [line for line in needed.imported.values() if line not in code.imports]
    code.needs |= needed.needs
    code.names |= NAMES | set(needed.imported)
    imported = ", ".join(sorted(n for n in needed.imported if n != "OrderedDict"))
    if imported:
        code.note = f"{imported}: imported here, not copied (an installed package's, or not copyable{note})."
    code.definitions += [
        "\n".join(_state_block(fn)),
        "\n".join(
            [
                f"MODULE = {build}",
                "load_module_state(MODULE, MODULE_STATE, MODULE_TRAINING, MODULE_FROZEN)",
            ]
        ),
        "\n".join(
            [
                "def module_under_test(*args):",
                f'    """{name} as the checks called it: of its inputs, then of MODULE_PARAMETERS."""',
                "    return call_module(MODULE, MODULE_PARAMETERS, *args)",
            ]
        ),
    ]
    code.call = "module_under_test"
    return code


SPECIAL.append(module_code)
