"""The source of a target's function, made self-contained.

A torch op is written by its public name (``torch.log``, ``F.leaky_relu``). A
Python function, or an ``autograd.Function`` class behind ``.apply``, is
copied with ``inspect.getsource`` together with everything it refers to at
module level, found by ``symtable`` (which knows exactly which names are
globals) and resolved in the module it came from: other functions and
classes are copied in turn, modules and objects of torch or the standard
library become imports written as the module wrote them, plain constants
become literals. Nothing of fuzzdiff is imported: a helper that lives there
is copied like any other.
"""

from __future__ import annotations
import __future__

import ast
import builtins
import functools
import inspect
import symtable
import sys
import textwrap
import types
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from fuzzdiff.case.programs import Program
from fuzzdiff.errors import FAMILY
from fuzzdiff.script.literals import ScriptError, value_literal

__all__ = ["TargetCode", "target_code", "objects_code", "SPECIAL"]

IMPORTABLE = frozenset(sys.stdlib_module_names) | {"torch"}
# Never imported by a script: their code is copied where a target uses it, or refused.
FORBIDDEN = frozenset({"fuzzdiff", "strategies", "hypothesis", "tests", "__main__"})
# Public namespaces searched for a torch callable, as the script writes them.
NAMESPACES = (
    ("torch", torch, "import torch"),
    ("F", F, "import torch.nn.functional as F"),
    ("torch.linalg", torch.linalg, "import torch"),
    ("torch.special", torch.special, "import torch"),
    ("torch.fft", torch.fft, "import torch"),
    ("torch.Tensor", torch.Tensor, "import torch"),
)
# Imports every script may have itself; a target importing the same is no clash.
STANDARD_IMPORTS = frozenset({"import math", "import sys", "import torch", "import torch.autograd.forward_ad as fwAD"})


@dataclass
class TargetCode:
    """What a script needs to call a target: imports, definitions, the callable's expression."""

    call: str
    imports: list[str] = field(default_factory=list)
    definitions: list[str] = field(default_factory=list)
    names: set[str] = field(default_factory=set)  # module-level names the definitions bind
    future_annotations: bool = False
    note: str = ""  # e.g. why user code is imported
    needs: set[str] = field(default_factory=set)  # third-party packages imported besides torch
    setup: list[str] = field(default_factory=list)  # statements to run after the imports
    kwargs: dict | None = None  # the call's keyword arguments, when not the case's
    direct: str = ""  # why ``call`` is the callable object itself (no function around it), if it is

    def merge(self, other: TargetCode) -> None:
        """Add ``other``'s imports, definitions and names (code it copied) to this code."""
        self.imports += [line for line in other.imports if line not in self.imports]
        self.definitions += other.definitions
        self.names |= other.names
        self.future_annotations |= other.future_annotations


def _root(module_name: str | None) -> str:
    return (module_name or "").split(".")[0]


def _torch_expression(obj) -> tuple[str, str] | None:
    """``(expression, import line)`` naming a torch callable publicly, or None."""
    name = getattr(obj, "__name__", None)
    if name:
        for prefix, namespace, line in NAMESPACES:
            if getattr(namespace, name, None) is obj:
                return f"{prefix}.{name}", line
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if isinstance(module, str) and _root(module) == "torch" and qualname and "<" not in qualname:
        try:
            found = functools.reduce(getattr, qualname.split("."), sys.modules[module])
        except (KeyError, AttributeError):
            return None
        if found is obj:
            return f"{module}.{qualname}", f"import {module}"
    return None


class _Emitter:
    """Collects definitions depth first, so that each comes after what it needs."""

    def __init__(self):
        self.code = TargetCode(call="")
        self.bound: dict[str, object] = {}  # script-level name -> object it stands for
        self.in_progress: set[int] = set()

    # -- names ------------------------------------------------------------------

    def bind(self, name: str, obj) -> bool:
        """Reserve ``name`` for ``obj``; False when it is bound to it already."""
        if name in self.bound:
            if self.bound[name] is obj or (_constant(obj) and self.bound[name] == obj):
                return False
            raise ScriptError(
                f"two different objects are both called {name!r} at module level ({self.bound[name]!r} and {obj!r})"
            )
        self.bound[name] = obj
        self.code.names.add(name)
        return True

    def add_import(self, line: str) -> None:
        if line not in self.code.imports:
            self.code.imports.append(line)

    # -- resolving one global ---------------------------------------------------

    def require(self, name: str, module: types.ModuleType) -> None:
        """Make the global ``name`` of ``module`` available in the script."""
        namespace = vars(module)
        if name not in namespace:
            if hasattr(builtins, name) or name.startswith("__"):
                return
            raise ScriptError(f"{name!r} is not defined in module {module.__name__}")
        obj = namespace[name]
        if isinstance(obj, types.ModuleType):
            if _root(obj.__name__) in FORBIDDEN:
                raise ScriptError(f"it uses module {obj.__name__}, which a script must not import")
            if _root(obj.__name__) not in IMPORTABLE:
                self.code.needs.add(_root(obj.__name__))
            if self.bind(name, obj):
                line = f"import {name}" if name == obj.__name__ else f"import {obj.__name__} as {name}"
                if line in STANDARD_IMPORTS:  # the script's own import of it
                    self.code.names.discard(name)
                self.add_import(line)
            return
        if _constant(obj):
            if self.bind(name, obj):
                self.code.definitions.append(f"{name} = {value_literal(obj)}")
            return
        if obj in FAMILY:  # fuzzdiff's exception family: a script needs only the builtin base below it
            if self.bind(name, obj):
                self.code.definitions.append(f"{name} = {obj.__mro__[1].__name__}")
            return
        if callable(obj) or isinstance(obj, type):
            self.callable(name, obj, module)
            return
        raise ScriptError(f"module-level {name!r} is a {type(obj).__name__}, which cannot be written into a script")

    def callable(self, name: str, obj, module: types.ModuleType) -> None:
        home = getattr(obj, "__module__", None)
        if (
            home
            and _root(home) not in FORBIDDEN
            and _root(home) != _root(module.__name__)
            and (inspect.isfunction(obj) or inspect.isclass(obj) or _root(home) in IMPORTABLE)
        ):
            # torch's, the standard library's, or a third-party package's (tensorly): imported
            if _root(home) not in IMPORTABLE:
                self.code.needs.add(_root(home))
            if self.bind(name, obj):
                self.add_import(_import_line(name, obj, module))
            return
        if _root(home) in IMPORTABLE:
            if self.bind(name, obj):
                self.add_import(_import_line(name, obj, module))
            return
        if isinstance(obj, types.MethodType) or not (inspect.isfunction(obj) or inspect.isclass(obj)):
            raise ScriptError(
                f"{name!r} is a {type(obj).__name__} from {home}; only functions and classes can be copied"
            )
        if not self.bind(name, obj):
            return
        self.copy(obj, as_name=name)

    # -- copying source ---------------------------------------------------------

    def copy(self, obj, as_name: str | None = None) -> None:
        """Append the source of a function or class, after what it refers to."""
        if id(obj) in self.in_progress:
            return
        self.in_progress.add(id(obj))
        module = sys.modules.get(obj.__module__)
        if module is None:
            raise ScriptError(f"the module of {obj!r} is not loaded")
        if inspect.isfunction(obj) and obj.__code__.co_freevars:
            raise ScriptError(
                f"{obj.__qualname__} is a closure (it uses {obj.__code__.co_freevars} from an enclosing function)"
            )
        if obj.__name__ == "<lambda>":
            source = f"{as_name} = {_lambda_source(obj)}"
        else:
            try:
                source = textwrap.dedent(inspect.getsource(obj))
            except (OSError, TypeError) as e:
                raise ScriptError(f"no source for {obj.__qualname__}: {e}") from None
        future = getattr(module, "annotations", None) is __future__.annotations
        self.code.future_annotations |= future
        for name in _global_names(source, future):
            if name != obj.__name__ or vars(module).get(name) is not obj:
                self.require(name, module)
        self.code.definitions.append(source.rstrip())
        if as_name is not None and as_name != obj.__name__ and obj.__name__ != "<lambda>":
            self.bind(obj.__name__, obj)
            self.code.definitions.append(f"{as_name} = {obj.__name__}")


def _constant(obj) -> bool:
    if isinstance(obj, (bool, int, float, str, type(None), torch.dtype)):
        return True
    if isinstance(obj, (list, tuple)):
        return all(_constant(v) for v in obj)
    if isinstance(obj, dict):
        return all(_constant(k) and _constant(v) for k, v in obj.items())
    return False


@functools.cache
def _module_imports(module_name: str) -> dict[str, str]:
    """name -> the import statement that binds it in the module's own source."""
    module = sys.modules.get(module_name)
    if module is None:
        return {}
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError, SyntaxError):
        return {}
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                bound = a.asname or a.name
                out[bound] = f"from {node.module} import {a.name}" + (f" as {a.asname}" if a.asname else "")
    return out


def _import_line(name: str, obj, module: types.ModuleType) -> str:
    line = _module_imports(module.__name__).get(name)
    if line is not None:
        return line
    home, qualname = obj.__module__, getattr(obj, "__qualname__", name)
    if "." in qualname or getattr(sys.modules.get(home), qualname, None) is not obj:
        raise ScriptError(f"cannot find an import for {name!r} ({obj!r})")
    return f"from {home} import {qualname}" + (f" as {name}" if name != qualname else "")


def _global_names(source: str, future_annotations: bool) -> list[str]:
    """Names a snippet reads at module level, in first-use order (symtable's verdict).

    With ``from __future__ import annotations`` in the module, names that only
    appear in annotations are never evaluated and are left out.
    """
    table = symtable.symtable(source, "<target>", "exec")
    names: list[str] = []

    def walk(t: symtable.SymbolTable) -> None:
        for s in t.get_symbols():
            if s.is_referenced() and (s.is_global() or t is table) and s.get_name() not in names:
                names.append(s.get_name())
        for child in t.get_children():
            walk(child)

    walk(table)
    if future_annotations:
        only = _annotation_only(source)
        names = [n for n in names if n not in only]
    return names


def _annotation_only(source: str) -> set[str]:
    tree = ast.parse(source)
    in_annotations: set[str] = set()
    for node in ast.walk(tree):
        for ann in _annotations(node):
            in_annotations |= {n.id for n in ast.walk(ann) if isinstance(n, ast.Name)}
    for node in ast.walk(tree):  # strip them, then see what is still read
        if isinstance(node, ast.arg):
            node.annotation = None
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
        elif isinstance(node, ast.AnnAssign):
            node.annotation = ast.Constant(None)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    return in_annotations - used


def _annotations(node) -> list:
    if isinstance(node, ast.arg) and node.annotation is not None:
        return [node.annotation]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
        return [node.returns]
    if isinstance(node, ast.AnnAssign):
        return [node.annotation]
    return []


def _lambda_source(fn) -> str:
    """The text of a lambda, cut out of the line(s) that define it."""
    try:
        lines, _ = inspect.findsource(fn)
    except (OSError, TypeError) as e:
        raise ScriptError(f"no source for a lambda: {e}") from None
    text = "".join(lines)
    code = fn.__code__
    params = list(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])
    found = [
        n
        for n in ast.walk(ast.parse(text))
        if isinstance(n, ast.Lambda)
        and n.lineno == code.co_firstlineno
        and [a.arg for a in (*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs)] == params
    ]
    if len(found) != 1:
        raise ScriptError(
            f"{len(found)} lambdas with parameters {params} on line "
            f"{code.co_firstlineno}; cannot tell which is the target"
        )
    segment = ast.get_source_segment(text, found[0])
    assert segment is not None  # ast.parse gives every node its positions
    return "(" + segment + ")"


def _program_code(fn, kwargs, arg_names, numbers_as_kwargs: bool = False) -> TargetCode | None:
    """A program target (fuzzdiff.case.programs.run_program): the drawn program as torch code.
    ``numbers_as_kwargs``: its statements' numbers are keyword-only parameters, which
    the call passes (the compile check's script holds them in a closure, as the
    compiled program reads them from its statements)."""
    if getattr(fn, "__module__", None) != "fuzzdiff.case.programs" or getattr(fn, "__name__", "") != "run_program":
        return None
    program = Program.from_json(kwargs["program"])
    numbers: dict[str, object] = {}
    if numbers_as_kwargs:
        program, numbers = _numbers_as_names(program, set(arg_names))
    source = program.source("program", list(arg_names))
    if numbers:
        _, body = source.split("\n", 1)
        source = (
            "# Its numbers are keyword-only parameters: the call passes them\n"
            f"def program({', '.join([*arg_names, '*', *numbers])}):\n{body}"
        )
    imports = (
        ["import torch"]
        + (["import torch.nn.functional as F"] if "F." in source else [])
        + (["import math"] if "math." in source else [])
    )
    return TargetCode(
        call="program",
        imports=imports,
        definitions=[source.rstrip()],
        names={"program"},
        kwargs={**{k: v for k, v in kwargs.items() if k != "program"}, **numbers},
    )


class _Name(str):
    """A statement's field written as the name of a parameter: str() and repr() are the name."""

    def __repr__(self) -> str:
        return str(self)


# Fields that hold no number the program computes with: the values a statement
# reads and the function it calls (a slice's dim, how many full slices precede
# its own, shapes the code itself: it stays a literal)
_NOT_NUMBERS = {"x", "other", "fn"}


def _numbers_as_names(program: Program, taken: set[str]) -> tuple[Program, dict[str, object]]:
    """``program`` with each number of its statements (a slice's bounds, an index,
    dims, a shape, a scalar) replaced by a name, ``<field>_<statement>``, and the
    numbers by name."""
    numbers: dict[str, object] = {}
    body = []
    for k, statement in enumerate(program.body):
        s = dict(statement)
        for key, value in statement.items():
            if key in _NOT_NUMBERS or (key == "dim" and s["op"] == "slice") or not _is_number(value):
                continue
            name = f"{key}_{k}"
            while name in taken or name in numbers:
                name += "_"
            numbers[name] = value
            s[key] = [_Name(name)] if isinstance(value, list) else _Name(name)  # a shape is passed whole
        body.append(s)
    return Program(program.inputs, tuple(body)), numbers


def _is_number(value) -> bool:
    """An int or float (no bool), or a non-empty list of them (a shape)."""
    if isinstance(value, list):
        return bool(value) and all(_is_number(v) for v in value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _tensorly_code(fn, kwargs, arg_names) -> TargetCode | None:
    """A tensorly target (catalog.tensorly_ops.TensorlyCall): its body, on tensorly's
    pytorch backend; the script needs tensorly besides torch."""
    if type(fn).__name__ != "TensorlyCall" or not inspect.isfunction(getattr(fn, "body", None)):
        return None
    code = target_code(fn.body, fn.body.__name__)
    code.needs.add("tensorly")
    code.setup.append(f"tensorly.set_backend({fn.name!r})  # the backend the case ran on")
    code.imports.append("import tensorly")
    return code


# Callables that say themselves how they are written out; each returns None if not its kind.
SPECIAL = [_program_code, _tensorly_code]


def target_code(fn, what: str, kwargs=None, arg_names=(), *, numbers_as_kwargs: bool = False) -> TargetCode:
    """Self-contained code for calling ``fn``; ``what`` names it in errors.
    ``numbers_as_kwargs``: numbers that code would write as literals (a
    program's) are keyword arguments of the call instead (``TargetCode.kwargs``)."""
    stored = getattr(fn, "fuzzdiff_source", None)  # a record's own source (targets.user._from_source)
    if stored is not None:
        return TargetCode(
            call=stored["call"],
            imports=list(stored["imports"]),
            definitions=list(stored["definitions"]),
            setup=list(stored["setup"]),
        )
    if numbers_as_kwargs:  # of the callables SPECIAL writes, only a program has numbers of its own
        code = _program_code(fn, dict(kwargs or {}), arg_names, numbers_as_kwargs=True)
        if code is not None:
            return code
    for special in SPECIAL:
        code = special(fn, dict(kwargs or {}), arg_names)
        if code is not None:
            return code
    named = _torch_expression(fn)
    if named is not None:
        expression, line = named
        return TargetCode(call=expression, imports=[line])
    emitter = _Emitter()
    try:
        if isinstance(fn, types.MethodType) and inspect.isclass(fn.__self__):
            cls = fn.__self__  # autograd.Function.apply and other classmethods
            module = sys.modules[cls.__module__]
            emitter.callable(cls.__name__, cls, module)
            emitter.code.call = f"{cls.__name__}.{fn.__name__}"
        elif inspect.isclass(fn):  # a class a script's copied functions use (fuzzdiff.checks.fragment)
            emitter.callable(fn.__name__, fn, sys.modules[fn.__module__])
            emitter.code.call = fn.__name__
        elif inspect.isfunction(fn):
            module = sys.modules[fn.__module__]
            name = "target_fn" if fn.__name__ == "<lambda>" else fn.__name__
            emitter.bind(name, fn)
            emitter.copy(fn, as_name=name)
            emitter.code.call = name
        else:
            raise ScriptError(
                f"its function is a {type(fn).__name__}, neither a torch op, a Python function nor a class's .apply"
            )
    except ScriptError as e:
        raise ScriptError(f"target {what!r} cannot be written torch-only: {e}") from None
    if "torch" not in emitter.bound:
        emitter.code.imports.insert(0, "import torch")
    return emitter.code


def objects_code(objects, what: str) -> TargetCode:
    """Self-contained code defining each of ``objects`` (module-level classes
    and functions) under its own name, each copied or imported as
    ``target_code`` does; ``what`` names them in errors."""
    emitter = _Emitter()
    try:
        for obj in objects:
            emitter.callable(obj.__name__, obj, sys.modules[obj.__module__])
    except ScriptError as e:
        raise ScriptError(f"{what} cannot be written torch-only: {e}") from None
    if "torch" not in emitter.bound:
        emitter.code.imports.insert(0, "import torch")
    return emitter.code
