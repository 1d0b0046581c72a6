"""An OpInfo sample's call in a standalone script (fuzzdiff.targets.opinfo.build.SampleCall).

The script calls the op with the very class the target calls it with
(fuzzdiff.targets.opinfo.call.OpInfoCall, copied by source): the sample's
input, args and kwargs, with every constant written as a literal (tensors
exactly, built afresh per call and cast to the fuzzed dtype, as the target's
copies are) and the fuzzed arguments in their places (in near mode, the
sample's value plus the fuzzed one). An op that is a public torch callable under the
default gradcheck wrapper is called by its public name; any other is taken
from torch's own OpInfo database by name and variant, and called through its
``gradcheck_wrapper``, as OpInfo's tests call it. The sample's output
processing is copied by source (it is the identity for most samples), and so
is the choice of the outputs autograd differentiates.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from typing import Any

import torch
from torch.utils._pytree import tree_unflatten

from fuzzdiff.script.literals import ScriptError, tensor_literal, value_literal
from fuzzdiff.script.source import SPECIAL, TargetCode, _torch_expression, objects_code, target_code
from fuzzdiff.targets.opinfo.build import SampleCall
from fuzzdiff.targets.opinfo.call import Differentiable, OpInfoCall, is_identity, unchanged, unwrapped_output

__all__ = ["opinfo_code", "CallWriter", "NAMES"]

OP = "OPINFO"  # the OpInfo, where the script takes it from op_db
CALL = "opinfo_call"
OUTPUT = "process_output"
NAMES = frozenset({OP, CALL, OUTPUT, "KEEP", "FUZZED", "SAMPLE", "LEAVES", "SPEC", "op_db", "functools"})
DB = "from torch.testing._internal.common_methods_invocations import op_db"


@functools.cache
def _default_wrapper() -> Any:
    """OpInfo's own gradcheck wrapper, which calls the op as it is."""
    # an optional dependency (expecttest), loaded with op_db already when an OpInfo target exists
    from torch.testing._internal.opinfo.core import OpInfo

    return next(f.default for f in dataclasses.fields(OpInfo) if f.name == "gradcheck_wrapper")


def _public(op) -> tuple[str, str] | None:
    """``(expression, import line)`` of ``op.op`` by a public torch name, or None."""
    parts = op.name.split(".")
    obj: Any = torch
    for part in parts:
        obj = getattr(obj, part, None)
    if obj is op.op and len(parts) > 1 and f"torch.{'.'.join(parts[:-1])}" in sys.modules:
        return f"torch.{op.name}", f"import torch.{'.'.join(parts[:-1])}"
    if obj is op.op:
        return f"torch.{op.name}", "import torch"
    named = _torch_expression(op.op)
    if named is None or any(p.startswith("_") and not p.startswith("__") for p in named[0].split(".")):
        return None
    return named


class CallWriter:
    """The sample's ``(input, args, kwargs)`` as source, leaf by leaf in pytree order:
    constants as exact literals, ``FUZZED`` where the fuzzed tensors go."""

    def __init__(self, positions: tuple[int, ...]):
        self.positions = positions
        self.leaf = 0

    def write(self, x: Any) -> str:
        if type(x) in (list, tuple):
            items = [self.write(v) for v in x]
            if type(x) is tuple:
                return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
            return f"[{', '.join(items)}]"
        if type(x) is torch.Size:
            return f"torch.Size([{', '.join(self.write(v) for v in x)}])"
        if type(x) is dict:
            return "{" + ", ".join(f"{k!r}: {self.write(v)}" for k, v in x.items()) + "}"
        return self._leaf(x)

    def _leaf(self, x: Any) -> str:
        k, self.leaf = self.leaf, self.leaf + 1
        if k in self.positions:
            return "FUZZED"
        if isinstance(x, torch.Tensor):
            return tensor_literal(x, indent="    ")
        if isinstance(x, torch.memory_format):
            return f"torch.{str(x).removeprefix('torch.')}"
        if isinstance(x, torch.device):
            return f"torch.device({str(x)!r})"
        if isinstance(x, slice):
            return f"slice({x.start!r}, {x.stop!r}, {x.step!r})"
        if x is Ellipsis:
            return "..."
        if isinstance(x, complex):
            return f"complex({value_literal(x.real)}, {value_literal(x.imag)})"
        if x is None or isinstance(x, (bool, int, float, str, torch.dtype)):
            return value_literal(x)
        raise ScriptError(f"its call holds a {type(x).__name__} ({x!r:.60}), which cannot be written as a literal")


def opinfo_code(fn, kwargs, arg_names) -> TargetCode | None:
    """The code of an OpInfo sample's call (targets.opinfo_build.SampleCall); None for any other function."""
    if not isinstance(fn, SampleCall):
        return None
    op = fn.op
    names = list(arg_names)[: len(fn.positions)]
    if len(names) != len(fn.positions):
        raise ScriptError(f"the call has {len(fn.positions)} fuzzed arguments, the script names {len(names)}")
    inp, args, kw = tree_unflatten(list(fn.leaves), fn.spec)
    sample = CallWriter(fn.positions).write((inp, args, kw))
    where = f"the OpInfo {op.name}" + (f" (variant {op.variant_test_name})" if op.variant_test_name else "")
    what = f"Sample {fn.index} of {where}"
    code = TargetCode(
        call=CALL,
        imports=["import torch"],
        names=set(NAMES),
        direct="an OpInfoCall object, as in the checks (torch.compile traces its leaves as inputs)",
    )
    public = _public(op) if op.gradcheck_wrapper is _default_wrapper() else None
    if public is not None:
        function, line = public
        if line not in code.imports:
            code.imports.append(line)
        code.note = f"The call is sample {fn.index} of {where}, called as torch's OpInfo tests call it."
    else:
        code.imports += [DB, "import functools"]
        code.needs.add("expecttest")
        code.definitions.append(
            f"# {where}, from torch's own OpInfo database: its op"
            + ("" if op.gradcheck_wrapper is _default_wrapper() else " and its gradcheck wrapper")
            + "\n# cannot be named by a public torch name\n"
            f"{OP} = next(op for op in op_db if (op.name, op.variant_test_name) == "
            f"({op.name!r}, {op.variant_test_name!r}))"
        )
        function = f"functools.partial({OP}.gradcheck_wrapper, {OP}.op)"
        code.note = (
            f"The call is sample {fn.index} of {where}, called as torch's OpInfo tests call it: the op "
            "comes from torch.testing._internal.common_methods_invocations.op_db (part of torch; it "
            "imports expecttest)."
        )
    output_fn, keep = unwrapped_output(fn.output_fn)
    identity = is_identity(output_fn)
    # the very code the target runs, copied by source (it imports torch.utils._pytree as pytree)
    copied = objects_code(
        [OpInfoCall, *([unchanged] if identity else []), *([Differentiable] if keep is not None else [])],
        "the OpInfo call",
    )
    code.merge(copied)
    output = "unchanged"
    if not identity:
        code.merge(processing := _copied(output_fn, where))
        code.definitions.append(f"{OUTPUT} = {processing.call}  # the sample's output_process_fn_grad")
        output = OUTPUT
    if keep is not None:
        code.definitions.append(f"KEEP = {keep!r}  # the outputs autograd differentiates, as gradcheck takes them")
        output = f"Differentiable({output}, KEEP)"
    near = [f"NEAR_{i} = {tensor_literal(s)}" for i, s in enumerate(fn.near) if s is not None]
    code.definitions.append(
        f"FUZZED = object()  # where the fuzzed tensors go in SAMPLE, in order: {', '.join(names)}\n"
        f"# {what}: (input, args, kwargs)\n"
        f"SAMPLE = {sample}\n"
        "LEAVES, SPEC = pytree.tree_flatten(SAMPLE)"
    )
    if near:
        code.definitions.append(
            "# The sample's values of the fuzzed arguments, which they perturb: the op gets each plus its own\n"
            + "\n".join(near)
        )
    near_tuple = ", ".join(f"NEAR_{i}" if s is not None else "None" for i, s in enumerate(fn.near))
    code.definitions.append(
        f"# {what}, as the checks call it: the fuzzed tensors go where SAMPLE has FUZZED"
        + ("\n# (each plus the sample's own value, NEAR)" if near else "")
        + f"\n{CALL} = OpInfoCall(\n"
        f"    {function},\n"
        "    SPEC,\n"
        "    LEAVES,\n"
        "    tuple(k for k, leaf in enumerate(LEAVES) if leaf is FUZZED),\n"
        f"    ({near_tuple}{',' if len(fn.near) == 1 else ''}),\n"
        f"    {output},\n"
        ")"
    )
    code.names |= {f"NEAR_{i}" for i in range(len(fn.positions))}
    return code


def _copied(fn, where: str) -> TargetCode:
    """The sample's output processing, copied by source."""
    try:
        return target_code(fn, f"the output processing of {where}")
    except ScriptError as e:
        raise ScriptError(f"its output_process_fn_grad cannot be copied: {e}") from None


SPECIAL.append(opinfo_code)
