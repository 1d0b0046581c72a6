"""The suite records failures in this checkout's corpus unless told otherwise."""

import importlib
import os
import sys
from pathlib import Path

import pytest

# xdist workers import this too, so every process agrees on one corpus.
os.environ.setdefault("FUZZDIFF_CORPUS", str(Path(__file__).resolve().parents[1] / "corpus"))


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
