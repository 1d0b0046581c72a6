"""fuzzdiff's own test session: its plugin, its Hypothesis profile, its corpus.

The suite records failures in this checkout's corpus unless told otherwise.
What fuzzdiff does to a session is done here and in pyproject.toml's addopts
(``-p fuzzdiff.pytest_plugin``), for this project only: the installed package
registers no pytest plugin and changes no settings.
"""

import importlib
import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from fuzzdiff import pytest_plugin

# xdist workers import this too, so every process agrees on one corpus.
os.environ.setdefault("FUZZDIFF_CORPUS", str(Path(__file__).resolve().parents[1] / "corpus"))


@pytest.hookimpl(trylast=True)  # after the plugin's (pyproject's addopts: -p fuzzdiff.pytest_plugin)
def pytest_configure(config):
    """This suite's plain @given tests run at the chosen fuzzdiff profile's
    settings; fuzz() calls are given their sizes and config explicitly (the
    fuzz loops: fuzz_options), since fuzz() reads no environment variable."""
    options = pytest_plugin.fuzz_options(config)
    settings.register_profile("fuzzdiff-tests", options["settings"])
    settings.load_profile("fuzzdiff-tests")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # n workers x torch's default threads oversubscribe the cores: small
        # kernels then run up to 100x slower. One thread per worker process.
        import torch
        torch.set_num_threads(1)


@pytest.fixture
def importable(tmp_path, monkeypatch):
    """``importable(name, source)``: a user's module, written to a fresh directory
    that becomes the working directory, imported, and forgotten afterwards."""
    written = []

    def write(name: str, source: str):
        (tmp_path / f"{name}.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.chdir(tmp_path)
        sys.modules.pop(name, None)
        written.append(name)
        return importlib.import_module(name)

    yield write
    for name in written:
        sys.modules.pop(name, None)
