"""fuzzdiff is a guest: installing it changes no other project's tests, and
calling it leaves the caller's process as it found it. Importing it is cheap
for the same reason, so an import inside a function says why it is there."""

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import fuzzdiff

REPO = Path(fuzzdiff.__file__).resolve().parents[1]


def _run(folder: Path, *argv: str, **env) -> subprocess.CompletedProcess:
    # $CI makes Hypothesis load its own "ci" profile: left out, so "default" is the baseline
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("FUZZDIFF_", "PYTEST_", "HYPOTHESIS")) and k != "CI"}
    clean.update(env, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, *argv], cwd=folder, env=clean, capture_output=True, text=True,
                          timeout=300)


def test_another_projects_hypothesis_tests_keep_hypothesis_defaults(tmp_path):
    """With fuzzdiff installed (and $FUZZDIFF_PROFILE=ci, which would pick
    fuzzdiff's bounded profile): the plain @given test of an unrelated project
    sees Hypothesis's own settings, its own example database and no
    FUZZDIFF_ variable but the one it was given."""
    (tmp_path / "test_plain.py").write_text(textwrap.dedent('''
        import os
        import sys
        from hypothesis import given, settings, strategies as st
        from hypothesis.database import DirectoryBasedExampleDatabase

        def test_hypothesis_defaults():
            s = settings()
            assert s.max_examples == 100 and not s.derandomize and s.deadline is not None
            assert isinstance(s.database, DirectoryBasedExampleDatabase)
            assert settings._current_profile == "default"
            assert [k for k in os.environ if k.startswith("FUZZDIFF_")] == ["FUZZDIFF_PROFILE"]
            assert "fuzzdiff" not in sys.modules and "fuzzdiff.pytest_plugin" not in sys.modules

        @given(st.integers())
        def test_a_property(x):
            assert isinstance(x, int)
    '''))
    run = _run(tmp_path, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_plain.py", FUZZDIFF_PROFILE="ci")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "2 passed" in run.stdout


def test_fuzzdiff_check_leaves_the_callers_process_as_it_found_it(tmp_path):
    """No gc.freeze(), no environment write, no torch flag or thread count left
    changed, no Hypothesis profile loaded; and its crash journal is the corpus's."""
    (tmp_path / "probe.py").write_text(textwrap.dedent('''
        import gc, os, sys
        import torch
        from hypothesis import settings

        def state():
            # torch's inductor writes _TORCHINDUCTOR_* itself, on its first compile
            return {"freeze": gc.get_freeze_count(),
                    "environ": {k: v for k, v in os.environ.items() if not k.startswith("_TORCHINDUCTOR_")},
                    "threads": torch.get_num_threads(), "grad": torch.is_grad_enabled(),
                    "dtype": torch.get_default_dtype(),
                    "deterministic": torch.are_deterministic_algorithms_enabled(),
                    "matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
                    "cudnn_tf32": torch.backends.cudnn.allow_tf32,
                    "profile": settings._current_profile, "max_examples": settings().max_examples,
                    "rng": torch.get_rng_state().tolist(),
                    "dynamo": torch._dynamo.config.get_config_copy(),
                    "inductor": torch._inductor.config.get_config_copy()}

        import fuzzdiff
        import torch._dynamo  # torch's own import (vmap's) sets $TORCHINDUCTOR_CACHE_DIR
        import torch._inductor.config
        before = state()
        report = fuzzdiff.check(torch.sin, "x: n", checks=("grad", "forward", "vmap", "compile"), max_examples=3,
                                seed=1, corpus="corpus")
        assert report.ok, report.summary()
        after = state()
        changed = sorted(k for k in before if before[k] != after[k])
        print("changed:", changed)
        sys.exit(1 if changed else 0)
    '''))
    run = _run(tmp_path, "probe.py")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]


def _function_level_imports(path: Path):
    """(line number, whether a comment says why) of each import inside a def."""
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                k = node.lineno - 1
                while k > 0 and lines[k - 1].strip().startswith(("import ", "from ")):
                    k -= 1  # the comment heads the block of imports
                yield node.lineno, "#" in lines[node.lineno - 1] or (k > 0 and "#" in lines[k - 1])


def test_every_function_level_import_says_why():
    """Imports live at the top of a module; one inside a function is for an
    optional dependency or for startup time, and a comment says which."""
    silent = [f"{path.relative_to(REPO)}:{line}"
              for package in ("fuzzdiff", "strategies") for path in sorted((REPO / package).rglob("*.py"))
              for line, said in _function_level_imports(path) if not said]
    assert not silent, f"function-level imports without a comment saying why: {silent}"


# The drivers resolve one FuzzConfig, from their flags and the environment, and
# hand it down (to a campaign's workers too); every module below them is handed
# its settings, and neither reads nor writes its process's environment.
DRIVERS = {"fuzzdiff.__main__", "fuzzdiff.cli", "fuzzdiff.commands", "fuzzdiff.api",
           "fuzzdiff.pytest_plugin"}
# Programs a module runs in a child process it starts itself (``python -c``),
# named by the module-level string that holds them: they run in the child, and
# may set the child's own environment (fresh.py gives its child compile caches
# of its own) but never touch this process's.
CHILD_PROGRAMS = {("fuzzdiff/search/fresh.py", "_BOOT")}
ENVIRONMENT = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}
WRITES = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"}


def _is_driver(module: str) -> bool:
    """A driver, or a module of a driver package (fuzzdiff.commands.options)."""
    return any(module == d or module.startswith(d + ".") for d in DRIVERS)


def _layers() -> list[str]:
    """The modules and packages of pyproject.toml's import-linter layers, top first."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: pytest's own dependency
        import tomli as tomllib
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    return [m.strip() for layer in layers for m in layer.split("|")]


def _modules() -> dict[str, Path]:
    """Every module of fuzzdiff and strategies, by dotted name."""
    out = {}
    for package in ("fuzzdiff", "strategies"):
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _os_names(tree: ast.AST) -> set[str]:
    return {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
            if a.name == "os"}


def _environment_uses(tree: ast.AST) -> list[int]:
    """The lines where a module reaches its process's environment: os.environ,
    os.getenv, os.putenv, ... under any name os is imported as, or imported from os."""
    names = _os_names(tree)
    return sorted(
        n.lineno for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module == "os" and any(a.name in ENVIRONMENT for a in n.names)
        or isinstance(n, ast.Attribute) and n.attr in ENVIRONMENT and isinstance(n.value, ast.Name)
        and n.value.id in names
    )


def _environment_writes(tree: ast.AST) -> list[int]:
    """The lines where a module writes its process's environment."""
    names = _os_names(tree)

    def is_environ(node):
        return isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name) \
            and node.value.id in names

    return sorted(
        n.lineno for n in ast.walk(tree)
        if isinstance(n, ast.Subscript) and isinstance(n.ctx, (ast.Store, ast.Del)) and is_environ(n.value)
        or isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        and (n.func.attr in WRITES and is_environ(n.func.value)
             or n.func.attr in ("putenv", "unsetenv") and isinstance(n.func.value, ast.Name)
             and n.func.value.id in names)
    )


def test_the_environment_rules_see_reads_and_writes():
    tree = ast.parse("import os as o\nfrom os import getenv\no.environ['A'] = '1'\no.environ.update(B='2')\n"
                     "x = o.environ.get('C')\no.putenv('D', '')\nimport json\njson.environ = 1\n")
    assert _environment_uses(tree) == [2, 3, 4, 5, 6]
    assert _environment_writes(tree) == [3, 4, 6]


def test_nothing_below_the_drivers_touches_the_environment():
    layers, modules = _layers(), _modules()
    assert DRIVERS <= set(layers), f"drivers not in the import-linter layers: {sorted(DRIVERS - set(layers))}"
    # every other module: those of the other layers, and any a layer does not name yet
    below = {m: path for m, path in modules.items() if not _is_driver(m)}
    layered = {m for m in below if any(m == l or m.startswith(l + ".") for l in layers)}
    assert {"fuzzdiff.campaign.loop", "fuzzdiff.campaign.cluster", "fuzzdiff.search.fuzzing", "fuzzdiff.record.files"} <= layered
    touching = {f"{path.relative_to(REPO)}:{line}" for path in below.values()
                for line in _environment_uses(ast.parse(path.read_text()))}
    assert not touching, f"the environment, read or written below the drivers: {sorted(touching)}"


def test_the_drivers_read_the_environment_and_never_write_it():
    modules = _modules()
    drivers = [m for m in modules if _is_driver(m)]
    assert "fuzzdiff.commands.options" in drivers and "fuzzdiff.campaign.loop" not in drivers
    writes = {f"{modules[m].relative_to(REPO)}:{line}" for m in drivers
              for line in _environment_writes(ast.parse(modules[m].read_text()))}
    assert not writes, f"a driver writes its process's environment: {sorted(writes)}"


def test_only_a_child_program_of_fuzzdiff_s_own_sets_an_environment():
    """Source that sets os.environ inside a string is a program for a child
    process that fuzzdiff starts (``python -c``), held in a module-level name
    that CHILD_PROGRAMS lists; there is no other."""
    sets = re.compile(r"os\.environ\[[^\]]*\]\s*=|os\.environ\.(?:update|setdefault)\(|os\.putenv\(")
    found = set()
    for path in _modules().values():
        module = str(path.relative_to(REPO))
        tree = ast.parse(path.read_text())
        programs = {id(c) for n in tree.body if isinstance(n, ast.Assign)
                    and any(isinstance(t, ast.Name) and (module, t.id) in CHILD_PROGRAMS for t in n.targets)
                    for c in ast.walk(n.value)}
        found |= {(module, n.lineno) for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and isinstance(n.value, str) and sets.search(n.value)
                  and id(n) not in programs}
        for name in {name for m, name in CHILD_PROGRAMS if m == module}:
            runs = [n for n in ast.walk(tree) if isinstance(n, ast.List) and any(
                isinstance(a, ast.Constant) and a.value == "-c" and isinstance(b, ast.Name) and b.id == name
                for a, b in zip(n.elts, n.elts[1:]))]
            assert runs, f"{module}: {name} is not run as a child's program ([..., '-c', {name}, ...])"
    assert not found, f"strings that set an environment outside a child's program: {sorted(found)}"


# Wording that dates itself or points at a tracker goes stale the day it is
# written: the code, its docstrings and the docs speak of the project as it is.
DATED = {
    "a tracker's issue number": r"\bissues? #?\d+",
    "a comparison with an earlier state": r"\b(?:older|oldest)\b|\bcame later\b|\badded (?:last|later)\b",
    "a date relative to the writing": r"\btoday'?s?\b|\bfor now\b",
    "a machine on loan": r"\blent\b",
    "a session of work": r"\b(?:previous|earlier|last|next|later|another|this work) session\b",
}
WORDING = [REPO / "README.md", *(REPO / "docs").rglob("*.md"), REPO / "docs" / "mkdocs.yml",
           *(REPO / "fuzzdiff").rglob("*.py"), *(REPO / "strategies").rglob("*.py"), *(REPO / "bench").glob("*.py")]


def test_the_denylist_finds_dated_wording():
    lines = ["(the per_sample check, issue 6)", "the older checks", "today's 10,731 pairs",
             "found on a lent GPU", "as in the previous session", "forward2 and checkpoint came later"]
    assert all(any(re.search(p, line, re.I) for p in DATED.values()) for line in lines)
    fine = ["pytorch/pytorch#197867", "a pytest session", "other projects' test sessions", "the old layout"]
    assert not any(re.search(p, line, re.I) for p in DATED.values() for line in fine)


def test_no_wording_dates_itself_or_points_at_a_tracker():
    assert len(WORDING) > 50
    found = [
        f"{path.relative_to(REPO)}:{n}: {what}: {line.strip()}"
        for path in WORDING
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for what, pattern in DATED.items()
        if re.search(pattern, line, re.I)
    ]
    assert not found, "\n".join(found)
