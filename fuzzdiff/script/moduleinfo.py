"""A ModuleInfo sample's call in a standalone script (fuzzdiff.targets.moduleinfo.call.ModuleCall).

The script calls the module with the very class the target calls it with
(ModuleCall, copied by source: it uses torch alone). The module's class is
named publicly (``torch.nn.BatchNorm2d``), its constructor arguments and the
forward's constants are written as literals, and the fuzzed tensors (the
forward's inputs, then the parameters, by name) go in their places. Built
under the same seed and called through ``torch.func.functional_call`` with
its buffers copied afresh, it runs as the checks ran it.
"""

from __future__ import annotations

import torch
from torch.utils._pytree import tree_unflatten

from fuzzdiff.script.literals import ScriptError
from fuzzdiff.script.opinfo import CallWriter
from fuzzdiff.script.source import SPECIAL, TargetCode, _torch_expression, objects_code
from fuzzdiff.targets.moduleinfo.call import ModuleCall

__all__ = ["moduleinfo_code", "NAMES"]

CALL = "module_call"
NAMES = frozenset({CALL, "FUZZED", "FORWARD", "LEAVES", "SPEC", "CONSTRUCTOR_ARGS", "CONSTRUCTOR_KWARGS"})


def moduleinfo_code(fn, kwargs, arg_names) -> TargetCode | None:
    """The code of a ModuleInfo sample's call; None for any other function."""
    if not isinstance(fn, ModuleCall):
        return None
    cls = fn.module_cls
    public = getattr(torch.nn, cls.__name__, None) is cls
    named = (f"torch.nn.{cls.__name__}", "import torch") if public else _torch_expression(cls)
    if named is None:
        raise ScriptError(f"its module class {cls.__module__}.{cls.__name__} has no public torch name")
    expression, line = named
    forward = tree_unflatten(list(fn.leaves), fn.spec)
    names = list(arg_names)[: len(fn.positions)]
    code = TargetCode(
        call=CALL,
        imports=["import torch", *([line] if line != "import torch" else [])],
        names=set(NAMES),
        direct="a ModuleCall object, as in the checks (torch.compile traces its leaves as inputs)",
        note=f"The module is {expression} in {'training' if fn.training else 'eval'} mode, built and called as "
        "the checks did: its parameters are the fuzzed arguments, through torch.func.functional_call.",
    )
    code.merge(objects_code([ModuleCall], "the module's call"))
    code.definitions.append(
        f"CONSTRUCTOR_ARGS = {CallWriter(()).write(fn.args)}\n"
        f"CONSTRUCTOR_KWARGS = {CallWriter(()).write(fn.kwargs)}\n"
        f"FUZZED = object()  # where the fuzzed inputs go in FORWARD, in order: {', '.join(names)}\n"
        "# the forward's (args, kwargs)\n"
        f"FORWARD = {CallWriter(fn.positions).write(forward)}\n"
        "LEAVES, SPEC = torch.utils._pytree.tree_flatten(FORWARD)\n"
        f"{CALL} = ModuleCall(\n"
        f"    {expression},\n"
        "    CONSTRUCTOR_ARGS,\n"
        "    CONSTRUCTOR_KWARGS,\n"
        f"    {fn.training!r},  # training mode\n"
        "    SPEC,\n"
        "    [None if leaf is FUZZED else leaf for leaf in LEAVES],\n"
        "    tuple(k for k, leaf in enumerate(LEAVES) if leaf is FUZZED),\n"
        f"    {fn.parameters!r},  # the parameters, fuzzed arguments after the inputs\n"
        ")"
    )
    return code


SPECIAL.append(moduleinfo_code)
