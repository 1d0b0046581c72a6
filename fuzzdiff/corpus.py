"""Corpus records: shrunk failures as plain JSON files (DESIGN.md section 4).

One record per distinct failure at ``<root>/<check>/<target>/<id>.json``. The
id is a hash of the failure's signature (target, check, verdict kind and the
input properties that matter), so the same bug found by many workers, runs or
machines lands in one file. Records are written to a temporary file and then
hard-linked into place: a reader never sees a torn record, and of several
concurrent writers of one id exactly one wins and none is lost. Loading a
record parses JSON and nothing else.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from fuzzdiff.case import Case, CaseError
from fuzzdiff.caseio import case_from_json
from fuzzdiff.verdict import KINDS, Verdict

__all__ = ["FORMAT", "STATUSES", "Record", "CorpusError", "signature", "write_record",
           "read_record", "iter_records", "default_root"]

FORMAT = 1
STATUSES = ("open", "fixed", "expected")


class CorpusError(ValueError):
    """A corpus file that cannot be read as a record; names the file and the field."""


def default_root() -> Path:
    return Path(os.environ.get("FUZZDIFF_CORPUS", "corpus"))


def signature(check: str, case: Case, verdict: Verdict) -> dict:
    """What makes two failures the same: the properties of the shrunk inputs."""
    features = set()
    for a in case.args:
        lay = a.strided
        if a.alias is not None:
            features.add(f"alias:{a.alias.kind}")
        if a.grad == "view":
            features.add("view")
        if not lay.is_contiguous(a.shape):
            features.add("noncontiguous")
        if lay.offset:
            features.add("storage_offset")
        if 0 in lay.strides:
            features.add("stride0")
        if 0 in a.shape:
            features.add("empty")
        features.update(f"special:{name.lstrip('-')}" for _, name in a.values.specials)
    return {"target": case.target, "check": check, "kind": verdict.kind, "dtype": case.dtype,
            "device": case.device, "features": sorted(features)}


def _record_id(sig: Mapping) -> str:
    digest = hashlib.sha256(json.dumps(sig, sort_keys=True).encode()).hexdigest()
    return digest[:16]


def _versions() -> dict:
    import hypothesis
    import torch

    import fuzzdiff
    return {"torch": torch.__version__, "hypothesis": hypothesis.__version__,
            "fuzzdiff": fuzzdiff.__version__}


def _clean(x: Any) -> Any:
    """JSON-safe: non-finite floats as {"float": hex}, tuples as lists."""
    if isinstance(x, float) and not math.isfinite(x):
        return {"float": x.hex()}
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return repr(x)


@dataclass(frozen=True)
class Record:
    id: str
    check: str
    case: Case
    verdict: Verdict
    status: str = "open"
    found_with: Mapping[str, str] | None = None
    path: Path | None = None

    @property
    def target(self) -> str:
        return self.case.target

    def to_json(self) -> dict:
        case = self.case.to_json()
        return _clean({
            "format": FORMAT, "id": self.id, "target": case["target"], "check": self.check,
            "dtype": case["dtype"], "device": case["device"], "inputs": case["args"],
            "kwargs": case["kwargs"], "params": case["params"],
            "verdict": {"kind": self.verdict.kind, "message": self.verdict.message,
                        "errors": self.verdict.errors},
            "status": self.status, "found_with": dict(self.found_with or _versions()),
            "signature": signature(self.check, self.case, self.verdict)})


def write_record(root: Path | str, check: str, case: Case, verdict: Verdict,
                 status: str = "open") -> tuple[Path, bool]:
    """Write the record unless one with the same signature exists.

    Returns ``(path, created)``; safe under any number of concurrent writers.
    """
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    sig = signature(check, case, verdict)
    record = Record(_record_id(sig), check, case, verdict, status)
    folder = Path(root) / check / _safe(case.target)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{record.id}.json"
    if path.exists():
        return path, False
    fd, tmp = tempfile.mkstemp(prefix=f".{record.id}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record.to_json(), f, indent=1, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # atomic, and fails if another writer got there first
            return path, True
        except FileExistsError:
            return path, False
    finally:
        os.unlink(tmp)


def _safe(name: str) -> str:
    """A target name as a folder name (user targets are ``module:qualname``)."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def _field(data: Mapping, key: str, path: Path, types):
    if key not in data:
        raise CorpusError(f"{path}: missing field {key!r}")
    value = data[key]
    if not isinstance(value, types) or isinstance(value, bool) and types is int:
        raise CorpusError(f"{path}: field {key!r} has the wrong type ({type(value).__name__})")
    return value


def read_record(path: Path | str) -> Record:
    """Parse and validate one record; CorpusError names the file and the field."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise CorpusError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise CorpusError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    if not isinstance(data, dict):
        raise CorpusError(f"{path}: a record is a JSON object, got {type(data).__name__}")
    fmt = _field(data, "format", path, int)
    if fmt != FORMAT:
        raise CorpusError(f"{path}: field 'format' is {fmt}; this fuzzdiff reads format {FORMAT}")
    check = _field(data, "check", path, str)
    status = _field(data, "status", path, str)
    if status not in STATUSES:
        raise CorpusError(f"{path}: field 'status' is {status!r}; expected one of {STATUSES}")
    verdict = _field(data, "verdict", path, dict)
    kind = verdict.get("kind")
    if kind not in KINDS:
        raise CorpusError(f"{path}: field 'verdict.kind' is {kind!r}; expected one of {KINDS}")
    try:
        case = case_from_json({"target": _field(data, "target", path, str),
                               "args": _field(data, "inputs", path, list),
                               "dtype": _field(data, "dtype", path, str),
                               "device": data.get("device", "cpu"),
                               "kwargs": data.get("kwargs", {}), "params": data.get("params", {})},
                              where="record")
    except CaseError as e:
        raise CorpusError(f"{path}: {str(e).replace('record.args', 'inputs')}") from None
    return Record(_field(data, "id", path, str), check, case,
                  Verdict(kind, str(verdict.get("message", "")), dict(verdict.get("errors") or {})),
                  status, data.get("found_with"), path)


def iter_records(root: Path | str):
    """Every ``*.json`` record under ``root``, sorted by path (README files skipped)."""
    for path in sorted(Path(root).glob("*/*/*.json")):
        yield path
