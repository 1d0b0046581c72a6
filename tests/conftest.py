"""The suite records failures in this checkout's corpus unless told otherwise."""

import os
from pathlib import Path

# xdist workers import this too, so every process agrees on one corpus.
os.environ.setdefault("FUZZDIFF_CORPUS", str(Path(__file__).resolve().parents[1] / "corpus"))
