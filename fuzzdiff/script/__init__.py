"""Standalone reproduction scripts: one case of one check as a torch-only program.

``standalone_script(check, case, verdict)`` returns the source of a Python
script that imports torch and the standard library only (never fuzzdiff),
rebuilds the case's inputs exactly (storages element by element, strides,
storage offsets, aliasing, which tensors are leaves), embeds the random probes
the check drew, runs the check's two computations and prints both, ending with
``OK: ...`` (exit status 0) or ``MISMATCH: ...`` (exit status 1). It is meant
to be pasted into a PyTorch bug report.

Each check contributes its computation as a ``fuzzdiff.checks.fragment.Fragment``:
its own ``Check.script`` (written in the check's module, calling the check's
torch-only functions, which are copied here by source), or, for the checks
whose scripts embed batched examples, modules, compiled runs and other backends (vmap,
per_sample, compile, backend), a function registered in ``fuzzdiff.script.fragments``.
"""

from __future__ import annotations

import inspect
import keyword
import re
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import torch

from fuzzdiff.case.case import Case
from fuzzdiff.case.directions import directions, probes_like
from fuzzdiff.case.features import relaid
from fuzzdiff.checks import CHECKS
from fuzzdiff.confirm.identities import EPS
from fuzzdiff.confirm.tolerance import tolerance
from fuzzdiff.paths.function import leaf_function
from fuzzdiff.script import backend as _backend  # noqa: F401  (registers the backend fragment)
from fuzzdiff.script import compile as _compile  # registers its fragment
from fuzzdiff.script import module as _module  # noqa: F401  (registers a module target's code)
from fuzzdiff.script import moduleinfo as _moduleinfo  # noqa: F401  (registers a ModuleInfo sample's code)
from fuzzdiff.script import opinfo as _opinfo  # noqa: F401  (registers an OpInfo sample's code)
from fuzzdiff.script import per_sample as _per_sample  # noqa: F401  (registers its fragment)
from fuzzdiff.script import vmap as _vmap  # noqa: F401  (registers the vmap fragment)
from fuzzdiff.script.fragments import FRAGMENTS, KWARGS_IN_CLOSURE, Fragment, register
from fuzzdiff.script.helpers import HELPERS, copies, defines_helper, helper_names, helper_source
from fuzzdiff.script.inputs import InputsCode, inputs_code
from fuzzdiff.script.literals import (
    ScriptError,
    dtype_name,
    tensor_literal,
    value_literal,
)
from fuzzdiff.script.source import FORBIDDEN, TargetCode, target_code
from fuzzdiff.targets import all_targets, get_target
from fuzzdiff.targets.recipe import ModuleFunction
from fuzzdiff.targets.target import Target
from fuzzdiff.verdict import Verdict

__all__ = ["standalone_script", "scripted_checks", "ScriptError", "FRAGMENTS", "register", "Fragment"]

# Module-level names every script may define; target code must not clash with them.
SCRIPT_NAMES = frozenset(
    {
        "math",
        "re",
        "sys",
        "torch",
        "fwAD",
        "inf",
        "nan",
        "call",
        "call_with",
        "main",
        "DTYPE",
        "DEVICE",
        "EPS",
        "ATOL",
        "RTOL",
        "V",
        "V64",
        "U",
        "W",
        "WRT",
        "ARG_NAMES",
        "LEAF_NAMES",
        "make_leaves",
        "make_args",
        "make_leaves_other",
        "make_args_other",
        "evaluate",
        "max_abs",
        "mismatch",
        "changed",
        "itertools",
        "example_of",
        "args_at",
        "stack_examples",
        "out_dim",
        "out_dims_of",
        "stack_outputs",
        "batched_outputs",
        "vmapped",
        "split_diff",
        "with_vjp",
        "with_grad",
        "with_jvp",
        "EXAMPLES",
        "BATCHED",
        "COTANGENTS",
        "TANGENTS",
        "BATCH_TANGENTS",
        "DIFF",
        "LEVELS",
        "IN_DIMS",
        "INDICES",
        "BACKEND",
        "on_backend",
        *_compile.TRANSFORM_NAMES,
        *HELPERS,
    }
)
LOCAL_NAMES = frozenset({"leaves", "dtype", "requires_grad", "t", "leaf"})

PROBE_DOCS = {
    "V": "cotangents v, one per output",
    "V64": "the same cotangents drawn for the float64 run",
    "U": "tangent directions u, one per leaf (constant along a stride-0 dim)",
    "W": "second probes w, one per leaf, contracting the first derivative",
}


@dataclass
class Context:
    """What a fragment may ask about the case it is written for."""

    check: str
    case: Case
    target: Target
    names: list[str]
    inputs: InputsCode
    crashed: bool = False  # the case killed its process: a fragment must not run it
    device: str = "cpu"  # where the script runs the case; ``case`` itself is on the CPU, where it is written

    @property
    def on_device(self) -> bool:
        """Whether the script's tensors go to its DEVICE (tensor_literal's ``on_device``)."""
        return self.device != "cpu"

    @property
    def dtype(self) -> str:
        return self.case.dtype

    @property
    def wrt(self) -> list[int]:
        return [i for i, d in enumerate(self.inputs.differentiable) if d]

    def wrt_constants(self) -> str:
        wrt = ", ".join(self.names[i] for i in self.wrt) or "none"
        return (
            f"ARG_NAMES = {self.names!r}\nLEAF_NAMES = {self.inputs.leaf_names!r}\n"
            f"WRT = {self.wrt!r}  # the differentiable arguments: {wrt}"
        )


def standalone_script(
    check: str,
    case: Case,
    verdict: Verdict | None = None,
    *,
    target: Target | None = None,
    storages: Mapping[int, torch.Tensor] | None = None,
    found_with: Mapping[str, str] | None = None,
) -> str:
    """The source of a torch-only script that reproduces ``check`` at ``case``.

    ``target`` defaults to ``get_target(case.target)`` (pass it for targets
    that are not registered); ``storages`` (argument index -> filled 1-D
    storage, e.g. from a corpus record) default to ``case.storages()``;
    ``found_with`` (a record's versions) goes into the header. Raises
    ScriptError for a check without a fragment or a target whose code cannot
    be written out.

    A case on another device than the CPU gets a script that builds every
    tensor as on the CPU, moves it to its ``DEVICE`` (a storage first, then
    viewed) and exits with status 2 where that device is absent; it is written
    from the case moved to the CPU (the draws are the same on every device),
    so writing it needs no such device.
    """
    write = script_writer(check)
    device = case.device
    if device != "cpu":
        _check_device(device, check, target or get_target(case.target))
        case = replace(case, device="cpu")
    if target is None:
        target = get_target(case.target)
    storages = {i: t.detach().cpu() for i, t in (storages or case.storages()).items()}
    names = _arg_names(target, TargetCode(call=""))
    closure = check in KWARGS_IN_CLOSURE
    code = _code(target, case.kwargs, names, closure)
    clash = code.names & SCRIPT_NAMES
    if clash:
        raise ScriptError(f"target {target.name!r} defines {sorted(clash)}, which the script uses for itself")
    names = _arg_names(target, code)
    if code.kwargs is not None:  # the code was written for the first names (a program)
        code = _code(target, case.kwargs, names, closure)
    on_device = device != "cpu"
    inputs = inputs_code(case, storages, names, on_device=on_device)
    crashed = verdict is not None and verdict.kind == "crash"
    ctx = Context(check, case, target, names, inputs, crashed, device)
    fragment: Fragment = write(ctx)
    copied, copied_imports, table = copies(fragment.copies)
    fragment = replace(fragment, helpers=(*fragment.helpers, *copied), imports=(*fragment.imports, *copied_imports))
    provided = frozenset(name for d in code.definitions if (name := defines_helper(d, table)))
    clash = (code.names & helper_names(fragment.helpers, table)) - provided
    if clash:
        raise ScriptError(f"target {target.name!r} defines {sorted(clash)}, which the script uses for itself")

    blocks = [_header(target, check, case, verdict, fragment, found_with, code, device)]
    data: list[str] = []
    guard = ""  # the first statements of main(), where a forward raised when the probes were drawn
    blocks.append(_banner("The function under test") + _definitions(code))
    seed = _seed(target, check, case)
    if seed is not None and any(n in code.names and f"import {n}" not in code.imports for n in ("random", "numpy")):
        raise ScriptError(f"target {target.name!r} binds 'random' or 'numpy' to another object; the script seeds them")
    blocks.append(_call(code, names, case.kwargs if code.kwargs is None else code.kwargs, seed, closure))
    if fragment.inputs:
        blocks.append(_banner("The inputs") + f"DTYPE = {dtype_name(case.torch_dtype)}\n" + inputs.storages)
        data.append(inputs.storages)
        blocks.append(inputs.functions)
    if fragment.other_layout:
        other = relaid(case)
        other_inputs = inputs_code(
            other, other.storages(), names, suffix="_other", what=" (the other layout)", on_device=on_device
        )
        blocks.append(other_inputs.storages)
        blocks.append(other_inputs.functions)
        data.append(other_inputs.storages)
    if fragment.probes:
        # a crash record's case killed its process: the script's own call reproduces
        # that, and writing the script must not run it
        probes, raised = _probes_text(
            target, case, storages, fragment.probes, run_forward=not crashed, on_device=on_device
        )
        if raised is not None and fragment.inputs:
            guard = _forward_first(*raised)
        blocks.append(_banner("Random probes, as drawn") + probes)
        data.append(probes)
    tol = tolerance(target, check, case.torch_dtype)
    override = target.tolerances.get(check)
    blocks.append(
        _banner("Tolerance") + f"ATOL, RTOL = {tol.atol!r}, {tol.rtol!r}  "
        f"# for {case.dtype} results"
        + (f"; widened: {override.reason}" if override else "")
        + f"\nEPS = {EPS!r}  # finite-difference step"
    )
    blocks.append(_banner("Helpers") + "\n\n\n".join(helper_source(fragment.helpers, provided, table)))
    if fragment.extra:
        blocks.append(fragment.extra)
        data.append(fragment.extra)
    version = 'print(f"torch {torch.__version__} on {DEVICE}")' if on_device else 'print(f"torch {torch.__version__}")'
    blocks.append(f"def main():\n    {version}\n" + guard + fragment.body)
    blocks.append('if __name__ == "__main__":\n    sys.exit(main())')
    seed = _seed(target, check, case)
    imports = _imports(code, fragment, any(re.search(r"\b(nan|inf)\b", d) for d in data), seed is not None)
    if on_device:
        imports = _device_block(imports, device)
    blocks.insert(1, imports)
    return "\n\n\n".join(b.strip("\n") for b in blocks) + "\n"


def scripted_checks() -> list[str]:
    """The checks a standalone script can be written for, in registry order."""
    return [name for name, c in CHECKS.items() if c.script is not None or name in FRAGMENTS]


def script_writer(check: str) -> Callable[[Context], Fragment]:
    """The check's own ``script`` (Check.script), else its fragment here."""
    own = CHECKS[check].script if check in CHECKS else None
    if own is not None:
        return own
    if check not in FRAGMENTS:
        raise ScriptError(f"no standalone script for check {check!r}; scripts exist for {', '.join(scripted_checks())}")
    return FRAGMENTS[check]


def _is_catalog(target: Target) -> bool:
    return any(t is target for t in all_targets())


def _code(target: Target, kwargs, names, numbers_as_kwargs: bool = False) -> TargetCode:
    """The target's code, copied; user code that cannot be copied is imported."""
    try:
        return target_code(target.fn, target.name, kwargs, names, numbers_as_kwargs=numbers_as_kwargs)
    except ScriptError as e:
        if _is_catalog(target):
            raise
        why = str(e)
    fn = target.fn
    owner = getattr(fn, "__self__", None)
    obj = owner if isinstance(owner, type) else fn
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    importable = (
        (inspect.isfunction(obj) or isinstance(obj, type))
        and module
        and module.split(".")[0] not in FORBIDDEN
        and "<" not in qualname
    )
    if not importable:
        raise ScriptError(f"target {target.name!r} can be neither copied ({why}) nor imported")
    top = qualname.split(".")[0]
    call = qualname + (f".{fn.__name__}" if obj is not fn else "")
    return TargetCode(
        call=call,
        imports=["import torch", f"from {module} import {top}"],
        names={top},
        note=f"{module}.{qualname} is user code, imported here, not copied ({why})",
    )


def _arg_names(target: Target, code: TargetCode) -> list[str]:
    taken = SCRIPT_NAMES | LOCAL_NAMES | code.names | {code.call.split(".")[0]}
    out = []
    for a in target.args:
        name = a.name if a.name.isidentifier() and not keyword.iskeyword(a.name) else "arg"
        while name in taken or name in out:
            name += "_"
        out.append(name)
    return out


def _banner(title: str) -> str:
    return f"# {'-' * 3} {title} {'-' * max(3, 80 - len(title))}\n"


def _header(target, check, case, verdict, fragment, found_with, code, device: str = "cpu") -> str:
    version = (found_with or {}).get("torch") or torch.__version__
    lines = [
        *textwrap.wrap(f"{target.name}: {fragment.summary} (check {check!r}, {case.dtype}).", 84),
        "",
        f"Found by fuzzdiff with torch {version}. "
        + (f"Needs torch and {', '.join(sorted(code.needs))}" if code.needs else "Needs only torch")
        + "; run it with python.",
        "It prints both sides and ends with OK, or with MISMATCH and exit status 1.",
    ]
    if device != "cpu":
        name = _device_name(device)
        kind = torch.device(device).type
        lines += [
            "",
            *textwrap.wrap(
                f'It runs on {name} (DEVICE = "{device}"): without it, it prints '
                f'"needs {name}; torch.{kind}.is_available() is False" and exits with status 2. '
                'DEVICE = "cpu" runs the very same on the CPU.',
                84,
            ),
        ]
        if verdict is not None and verdict.kind == "crash" and kind == "cuda":
            lines += [
                "",
                *textwrap.wrap(
                    "The recorded failure is a crash: run it as CUDA_LAUNCH_BLOCKING=1 python "
                    "SCRIPT, so that the faulting kernel raises at the call that launches it.",
                    84,
                ),
            ]
    if verdict is not None:
        lines += [
            "",
            *textwrap.wrap(f"Recorded verdict: {verdict}", 84, break_long_words=False, break_on_hyphens=False),
        ]
    if code.needs:
        lines += ["", f"Needs {', '.join(sorted(code.needs))} besides torch: the code under test uses it."]
    if code.note:
        lines += ["", *textwrap.wrap(code.note, 84)]
    text = "\n".join(lines).replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return f'"""{text}\n"""'


def _imports(code: TargetCode, fragment: Fragment, special_floats: bool, seeded: bool = False) -> str:
    future = ["from __future__ import annotations"] if code.future_annotations else []
    std = ["import math", "import sys", *(line for line in fragment.imports if not _from_torch(line))]
    if seeded:
        std.append("import random")
    if "skip_missing_formula" in fragment.helpers:
        std.append("import re")
    if special_floats:
        std.append("from math import inf, nan")
    torch_lines = ["import torch"] + (["import torch.autograd.forward_ad as fwAD"] if fragment.forward_ad else [])
    other_std: list[str] = []
    other_torch: list[str] = []
    third: list[str] = ["import numpy"] if seeded and "numpy" in code.needs else []
    for line in (*code.imports, *filter(_from_torch, fragment.imports)):
        if line in std or line in torch_lines:
            continue
        root = line.split()[1].split(".")[0]
        (other_torch if root == "torch" else third if root in code.needs else other_std).append(line)
    groups = [
        future,
        sorted(set(std + other_std), key=lambda l: (l.startswith("from"), l)),
        torch_lines + sorted({l for l in other_torch if l not in torch_lines}, key=lambda l: (l.startswith("from"), l)),
        sorted(set(third), key=lambda l: (l.startswith("from"), l)),
    ]
    return "\n\n".join("\n".join(g) for g in groups if g)


def _device_name(device: str) -> str:
    kind = torch.device(device).type
    return {"cuda": "CUDA", "mps": "MPS", "xpu": "XPU"}.get(kind, kind)


def _check_device(device: str, check: str, target: Target) -> None:
    """ScriptError unless a script can run ``check`` of ``target`` on ``device``:
    a module (per_sample's, or a module target's) is built on the CPU by the script."""
    try:
        kind = torch.device(device).type
    except RuntimeError as e:
        raise ScriptError(f"the case's device {device!r} is not one torch knows ({e})") from None
    if not callable(getattr(getattr(torch, kind, None), "is_available", None)):
        raise ScriptError(
            f"a script cannot tell whether device {device!r} is available: torch.{kind} has no is_available"
        )
    if check == "per_sample" or isinstance(target.fn, ModuleFunction):
        raise ScriptError(f"a module's script builds it on the CPU; the case is on {device}")


def _device_block(imports: str, device: str) -> str:
    """The imports, then DEVICE and the exit (status 2) where it is absent."""
    kind = torch.device(device).type
    name = _device_name(device)
    device_text = (
        f"{_banner('The device')}"
        f'DEVICE = "{device}"  # every tensor is built as on the CPU, then moved here; "cpu" runs it on the CPU\n'
        f'if DEVICE != "cpu" and not torch.{kind}.is_available():\n'
        f'    print("needs {name}; torch.{kind}.is_available() is False", file=sys.stderr)\n'
        "    sys.exit(2)"
    )
    return imports + "\n\n\n" + device_text


def _from_torch(line: str) -> bool:
    return line.split()[1].split(".")[0] == "torch"


def _definitions(code: TargetCode) -> str:
    setup = "".join(f"{line}\n" for line in code.setup)
    if not code.definitions:
        return setup + f"# {code.call} is a PyTorch op: nothing to define."
    return setup + "\n\n\n".join(code.definitions)


def _seed(target: Target, check: str, case: Case) -> int | None:
    """The seed every call of a random target runs from, as fuzzdiff.search.runner
    seeds it; None where the target draws nothing or the check seeds itself."""
    if not target.random or CHECKS[check].seeds_random:
        return None
    return sum(a.values.seed for a in case.args) % 2**32


def _call(code: TargetCode, names: list[str], kwargs: Mapping, seed: int | None = None, closure: bool = False) -> str:
    """``call``: the function under test at the fuzzed keyword arguments, written
    in the call, or with ``closure`` held in one (see fuzzdiff.script.fragments)."""
    if code.direct and not kwargs and seed is None:
        return f"# The function under test: {code.direct}\ncall = {code.call}"
    held = closure and bool(kwargs)
    args = list(names)
    if held:
        args.append("**kwargs")
    for k, v in {} if held else kwargs.items():
        args.append(f"{k}={value_literal(v)}" if k.isidentifier() else f"**{{{k!r}: {value_literal(v)}}}")
    seeding = ""
    if seed is not None:
        seeding = (
            "    # it draws random numbers: every call starts from one seed, as in the check\n"
            f"    torch.manual_seed({seed})\n    random.seed({seed})\n"
        )
        if "numpy" in code.needs:
            seeding += f"    numpy.random.seed({seed})\n"
    call = (
        f"def call({', '.join(names)}):\n"
        '    """One call of the function under test, with the fuzzed keyword arguments."""\n'
        f"{seeding}    return {code.call}({', '.join(args)})"
    )
    if not held:
        return call
    literal = "{" + ", ".join(f"{k!r}: {value_literal(v)}" for k, v in kwargs.items()) + "}"
    return (
        "def call_with(kwargs):\n"
        '    """The function under test with its keyword arguments held in a closure, as the\n'
        "    compile check holds them: dynamo traces a number it reaches through a closure as\n"
        '    symbolic (a SymInt, a SymFloat), and a number written in the code as a constant."""\n\n'
        + textwrap.indent(call, "    ")
        + "\n\n    return call\n\n\n"
        + f"call = call_with({literal})"
    )


def _probes_text(
    target: Target, case: Case, storages, keys, run_forward: bool = True, on_device: bool = False
) -> tuple[str, tuple[str, str] | None]:
    """Each probe global as literal tensors, computed exactly as the check draws them,
    and (the global, the exception) where the forward raised drawing cotangents.
    The cotangents need the outputs' shapes: without ``run_forward``, or where the
    forward raises, they are None. ``on_device``: the literals go to the script's DEVICE."""

    def fresh():
        return {i: t.clone() for i, t in storages.items()}

    f = leaf_function(target, case, storages=fresh())
    values: dict[str, str | list[torch.Tensor]] = {}  # literal tensors, or the code that stands for them
    raised: tuple[str, str] | None = None
    if "U" in keys:
        values["U"] = directions(case.params, f.leaves)
    if "W" in keys:
        values["W"] = probes_like(case.params, "second", f.leaves)
    for key, cast in (("V", None), ("V64", torch.float64)):
        if key not in keys:
            continue
        if key == "V64" and case.torch_dtype == torch.float64:
            values[key] = "V  # the case is float64 already"
            continue
        if not run_forward:
            values[key] = "None  # the case killed the process that ran it: the call below does again"
            continue
        g = f if cast is None else leaf_function(target, case, cast=cast, storages=fresh())
        try:
            with torch.no_grad():
                outs = g(*g.leaves)
        except Exception as e:  # noqa: BLE001 - the script raises the same at its forward
            values[key] = f"None  # the forward raised {type(e).__name__} when this was written"
            raised = raised or (key, type(e).__name__)
            continue
        values[key] = probes_like(case.params, "cotangent", outs)
    lines = []
    for key in ("V", "V64", "U", "W"):
        if key not in values:
            continue
        v = values[key]
        lines.append(f"# {PROBE_DOCS[key]}")
        if isinstance(v, str):
            lines.append(f"{key} = {v}")
        else:
            items = "".join(f"    {tensor_literal(t, indent='    ', on_device=on_device)},\n" for t in v)
            lines.append(f"{key} = [\n{items}]")
    return "\n".join(lines), raised


def _forward_first(key: str, error: str) -> str:
    """main()'s first statements where the forward raised ``error`` drawing the
    cotangents ``key``: with them None, the check's own computation would fail
    on them first; the call at the inputs raises the function's own error."""
    dtype = "torch.float64" if key == "V64" else ""
    return (
        f"    if {key} is None:  # the function raised {error} at these inputs when this was written\n"
        f"        call(*make_args(make_leaves({dtype})))  # raises it here\n"
        f'        print("OK: the function runs at these inputs, where it raised {error} when this script "\n'
        '              "was written: no cotangents were drawn, so nothing else is compared")\n'
        "        return 0\n"
    )
