"""Small functions a script may need, as source text, each with what it needs.

Where fuzzdiff's own computation is torch-only (reverse mode, inner products
in double precision, tensor comparison) the script gets that very function,
copied by source with what it refers to (``_copied``), so that it runs the
code that found the failure. The rest restate in plain torch what a check
does through its Case (finite differences at the case's values, forward mode
around a dual-number spy, printing and judging).
"""

from __future__ import annotations

import ast
import sys
from collections import ChainMap
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fuzzdiff.case.directions import absdot, dot
from fuzzdiff.confirm.compare import max_abs, mismatch
from fuzzdiff.guards.unsupported import UNSUPPORTED_PATTERNS
from fuzzdiff.paths.forward import same_layout
from fuzzdiff.paths.numerical import directional_difference
from fuzzdiff.paths.reverse import vjp
from fuzzdiff.script.literals import ScriptError
from fuzzdiff.script.source import STANDARD_IMPORTS, target_code

__all__ = ["HELPERS", "helper_source", "helper_names", "defines_helper", "COPIED", "copies", "reserve"]

HELPERS: dict[str, tuple[str, tuple[str, ...]]] = {}
COPIED: set[str] = set()  # helper names that are fuzzdiff's own functions, copied


def _helper(name: str, source: str, *needs: str) -> None:
    HELPERS[name] = (source.strip("\n"), needs)


Table = Mapping[str, tuple[str, tuple[str, ...]]]  # helper name -> (source, the helpers it needs)


def _copied(fn: Callable[..., Any], into: dict, imports: frozenset[str] = frozenset()) -> list[str]:
    """``fn`` and every module-level name it refers to, each a helper of its
    own in ``into`` (so shared ones are written once), annotations dropped: a
    script imports nothing from typing. Returns the import lines they need
    beyond the script's own, which must be among ``imports``."""
    code = target_code(fn, fn.__name__)
    extra = sorted(set(code.imports) - STANDARD_IMPORTS)
    if any(line not in imports for line in extra):
        raise ScriptError(f"{fn.__qualname__} cannot be copied into a script: it needs {extra}")
    trees = [ast.parse(definition) for definition in code.definitions]
    names = [_defined(tree) for tree in trees]
    for tree, name in zip(trees, names):
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        needs = tuple(sorted((used & set(names)) - {name}))  # imported names come with the imports
        source = ast.unparse(_without_annotations(tree))
        if into.setdefault(name, (source, needs))[0] != source:
            raise ScriptError(f"{fn.__qualname__} needs a {name!r} other than the script's own")
    return extra


def copies(fns: Sequence[Callable[..., Any]]) -> tuple[tuple[str, ...], tuple[str, ...], Table]:
    """A fragment's ``copies``, copied by source: their names, the imports they
    need (any torch import; the standard library's), and the helpers of this
    script, its own copies first: two checks may each have a function of one
    name (``floating``), and each script gets its own check's."""
    imports: list[str] = []
    own: dict = {}
    for fn in fns:
        for line in _copied(fn, own, _ANY_TORCH_IMPORT):
            if line not in imports:
                imports.append(line)
    return tuple(fn.__name__ for fn in fns), tuple(imports), ChainMap(own, HELPERS)


def reserve(fns: Sequence[Callable[..., Any]]) -> None:
    """Copy ``fns`` into the helpers every script may use, so that their names
    are the script's own (fuzzdiff.script.SCRIPT_NAMES): no target may define them."""
    for fn in fns:
        _copied(fn, HELPERS, _ANY_TORCH_IMPORT)


class _AnyTorchImport(frozenset):
    """Import lines a copied check function may need: torch's and the standard library's."""

    def __contains__(self, line: object) -> bool:
        if not isinstance(line, str):
            return False
        root = line.split()[1].split(".")[0]
        return root == "torch" or root in sys.stdlib_module_names


_ANY_TORCH_IMPORT = _AnyTorchImport()


def _defined(tree: ast.Module) -> str:
    node = tree.body[0]
    return node.name if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else node.targets[0].id  # type: ignore[attr-defined]


def _without_annotations(tree: ast.Module) -> ast.Module:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
            for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs):
                arg.annotation = None
            for star in (node.args.vararg, node.args.kwarg):
                if star is not None:
                    star.annotation = None
    return tree


for _fn in (vjp, dot, absdot, max_abs, mismatch, directional_difference, same_layout):
    _known = set(HELPERS)
    _copied(_fn, HELPERS)
    COPIED.update(set(HELPERS) - _known)


_helper(
    "outputs",
    '''
def outputs(result):
    """The floating-point tensors in a result (a tensor, tuple, list or dict), in order."""
    if isinstance(result, torch.Tensor):
        return [result] if result.is_floating_point() or result.is_complex() else []
    if isinstance(result, dict):
        result = list(result.values())
    if isinstance(result, (tuple, list)):
        return [t for r in result for t in outputs(r)]
    return []
''',
)

_helper(
    "f",
    '''
def f(*leaves):
    """The function under test as a function of the leaves: its floating-point outputs."""
    return outputs(call(*make_args(leaves)))
''',
    "outputs",
)


_helper(
    "finite_difference",
    '''
def finite_difference(v, u):
    """<v, J u> by central differences in float64 at the same values, and its error estimate."""
    return directional_difference(f, make_leaves(torch.float64, requires_grad=False), u, v, EPS)
''',
    "f",
    "directional_difference",
)

_helper(
    "judge",
    '''
def judge(identity, analytic, reference, scale, noise=0.0):
    """Print both sides of an identity; (agree, summary) with the allowed error
    ATOL + RTOL * scale + 4 * noise (noise: the reference's own error estimate)."""
    if math.isnan(analytic) != math.isnan(reference):
        error = math.inf
    elif analytic == reference:
        error = 0.0
    else:
        error = abs(analytic - reference)
    allowed = ATOL + RTOL * scale + 4 * noise
    relative = error / abs(reference) if reference else math.inf if error else 0.0
    print(f"{identity}:")
    print(f"  analytic   {analytic!r}")
    print(f"  reference  {reference!r}")
    print(f"  abs error  {error:.3g}   rel error {relative:.3g}   allowed {allowed:.3g}")
    return error <= allowed, f"{identity}: {analytic!r} vs {reference!r} (abs error {error:.3g})"
''',
)

_helper(
    "compare",
    '''
def compare(names, got, expected, scale_floor=0.0):
    """Print each pair's worst error; (agree, summary of the first pair outside
    ATOL + RTOL * scale, where scale is the largest |expected| of that pair)."""
    if len(got) != len(expected):
        return False, f"{len(got)} tensors vs {len(expected)}"
    first = None
    for name, a, b in zip(names, got, expected):
        error, index = mismatch(a, b)
        scale = max(max_abs(b), scale_floor)
        allowed = ATOL + RTOL * scale
        at = f" at {list(index)}" if index and error else ""
        if a.shape != b.shape:
            at = f" (shape {list(a.shape)} vs {list(b.shape)})"
        print(f"{name}: max abs error {error:.3g}{at} (scale {scale:.3g}, allowed {allowed:.3g})")
        if not error <= allowed:
            if b.numel() <= 16:
                print(f"  got      {a.detach().tolist()}")
                print(f"  expected {b.detach().tolist()}")
            if first is None:
                first = f"{name}{at}: abs error {error:.3g} (scale {scale:.3g})"
    return first is None, first or "all agree"
''',
    "max_abs",
    "mismatch",
)

_helper(
    "skip_missing_formula",
    f'''
UNSUPPORTED = re.compile({"|".join(p.pattern for p in UNSUPPORTED_PATTERNS)!r}, re.I)


def skip_missing_formula(identity, error):
    """Go on without an identity when torch lacks a formula it needs (e.g. no forward-mode
    derivative of some backward), as torch's own messages say. Any other error, a
    NotImplementedError of the function itself included, is a finding and is raised."""
    text = f"{{type(error).__name__}}: {{error}}"
    if not UNSUPPORTED.search(text):
        raise error
    print(f"{{identity}}: not supported by torch here ({{text.splitlines()[0]}})")
''',
)

_helper(
    "finish",
    '''
def finish(results):
    """The last line: MISMATCH (exit status 1) or OK (exit status 0)."""
    if not results:
        print("OK: nothing could be compared (torch lacks the formulas needed)")
        return 0
    bad = [summary for ok, summary in results if not ok]
    if bad:
        print("MISMATCH: " + "; ".join(bad))
        return 1
    print("OK: " + "; ".join(summary for _, summary in results))
    return 0
''',
)


def helper_names(names, table: Table = HELPERS) -> set[str]:
    """The helpers named and every helper they need."""
    out: set[str] = set()
    stack = list(names)
    while stack:
        name = stack.pop()
        if name not in out:
            out.add(name)
            stack.extend(table[name][1])
    return out


def defines_helper(definition: str, table: Table = HELPERS) -> str | None:
    """The helper that ``definition`` (a target's copied code) is, word for word
    once annotations are dropped, or None: a target module that imports the very
    function a script copies (fuzzdiff.targets.module.batch_dims) defines it once."""
    tree = _without_annotations(ast.parse(definition))
    name = _defined(tree)
    return name if name in table and table[name][0] == ast.unparse(tree) else None


def helper_source(names, provided: frozenset[str] = frozenset(), table: Table = HELPERS) -> list[str]:
    """The helpers named, with what they need, each once, dependencies first;
    none of ``provided`` (defined already)."""
    out: list[str] = []
    seen: set[str] = set(provided)

    def add(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        source, needs = table[name]
        for n in needs:
            add(n)
        out.append(source)

    for n in names:
        add(n)
    return out
