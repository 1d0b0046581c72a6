"""fuzzdiff is a guest: installing it changes no other project's tests, and
calling it leaves the caller's process as it found it."""

import os
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
            return {"freeze": gc.get_freeze_count(), "environ": dict(os.environ),
                    "threads": torch.get_num_threads(), "grad": torch.is_grad_enabled(),
                    "dtype": torch.get_default_dtype(),
                    "deterministic": torch.are_deterministic_algorithms_enabled(),
                    "matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
                    "cudnn_tf32": torch.backends.cudnn.allow_tf32,
                    "profile": settings._current_profile, "max_examples": settings().max_examples,
                    "rng": torch.get_rng_state().tolist()}

        import fuzzdiff
        import torch._dynamo  # torch's own import (vmap's) sets $TORCHINDUCTOR_CACHE_DIR
        before = state()
        report = fuzzdiff.check(torch.sin, "x: n", checks=("grad", "forward", "vmap"), max_examples=3,
                                seed=1, corpus="corpus")
        assert report.ok, report.summary()
        after = state()
        changed = sorted(k for k in before if before[k] != after[k])
        print("changed:", changed)
        sys.exit(1 if changed else 0)
    '''))
    run = _run(tmp_path, "probe.py")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
