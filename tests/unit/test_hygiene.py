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


# The drivers resolve a FuzzConfig; everything below them is handed one.
READS_ENVIRONMENT = {"fuzzdiff/cli.py", "fuzzdiff/commands.py", "fuzzdiff/pytest_plugin.py",
                     "fuzzdiff/campaign.py", "fuzzdiff/fuzzing.py", "fuzzdiff/corpus.py"}


def test_nothing_below_the_drivers_reads_the_environment():
    readers = set()
    for package in ("fuzzdiff", "strategies"):
        for path in (REPO / package).rglob("*.py"):
            tree = ast.parse(path.read_text())
            if any(isinstance(n, ast.Attribute) and n.attr in ("environ", "getenv")
                   and isinstance(n.value, ast.Name) and n.value.id == "os" for n in ast.walk(tree)):
                readers.add(str(path.relative_to(REPO)))
    assert readers <= READS_ENVIRONMENT, f"reads os.environ below the drivers: {sorted(readers - READS_ENVIRONMENT)}"


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
