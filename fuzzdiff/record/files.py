"""The corpus: shrunk failures as record files (docs/pages/design.md, contract 4).

One record per distinct failure at ``<root>/<check>/<target>/<id>.json``. The
id is a hash of the failure's signature (target, check, verdict kind and the
input properties that matter), so the same bug found by many workers, runs or
machines lands in one file. Records are written to a temporary file and then
hard-linked into place: a reader never sees a torn record, and of several
concurrent writers of one id exactly one wins and none is lost. Loading a
record parses JSON (and safetensors) and nothing else. What a record holds,
and how it is encoded and decoded, is fuzzdiff.record.format.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from safetensors.torch import save

from fuzzdiff.case.case import Case
from fuzzdiff.record.format import (
    INLINE_LIMIT,
    OPINFO,
    STATE_KEY,
    STATUSES,
    CorpusError,
    Record,
    module_state,
    record_from_json,
    signature,
)
from fuzzdiff.targets import stored_sample_of
from fuzzdiff.targets.releases import release
from fuzzdiff.targets.stored_sample import SampleError, StoredSample
from fuzzdiff.verdict import Verdict

__all__ = [
    "write_record",
    "read_record",
    "rewrite_record",
    "iter_records",
    "default_root",
    "find_record",
    "merge",
    "Merge",
    "mark",
    "store_opinfo_sample",
]


def default_root(configured: Path | str | None) -> Path:
    """The corpus a command uses: the one its driver resolved (FuzzConfig.corpus:
    --corpus, else $FUZZDIFF_CORPUS), else ./corpus."""
    return Path("corpus") if configured is None else Path(configured)


def _record_id(sig: Mapping) -> str:
    digest = hashlib.sha256(json.dumps(sig, sort_keys=True).encode()).hexdigest()
    return digest[:16]


def mark(record: Record, status: str, fixed_in: str | None = None, reason: str | None = None) -> None:
    """Set a record's status (and the release that fixed it, or why it is
    expected) in its file, leaving every other field as it is."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    if record.path is None:
        raise ValueError("the record has no file")
    path = Path(record.path)
    data = json.loads(path.read_text())
    data["status"] = status
    if status == "fixed" and fixed_in is not None:
        data["fixed_in"] = release(fixed_in)
    else:
        data.pop("fixed_in", None)
    if status == "expected" and reason is not None:
        data["reason"] = reason
    elif status != "expected":
        data.pop("reason", None)
    _replace(path, data)


def store_opinfo_sample(record: Record) -> bool:
    """Add ``opinfo_sample`` to the file of an OpInfo target's record that has
    none, leaving every other field as it is; False when there is nothing to
    add. The call is the target as this torch builds it from the record's
    sample index, so this runs only under the torch release the record was
    found with (ValueError otherwise: under another, the index may name
    another sample). TargetUnavailable or SampleError when it cannot be built or stored."""
    if record.path is None:
        raise ValueError("the record has no file")
    if record.opinfo_sample is not None or not record.target.startswith(OPINFO):
        return False
    found = release((record.found_with or {}).get("torch", "unknown"))
    if found != release():
        raise ValueError(
            f"{record.path}: found with torch {found}; its sample index names a sample of that "
            f"torch's list, and this is torch {release()}"
        )
    stored = stored_sample_of(record.target)
    if stored is None:
        return False
    path = Path(record.path)
    data = json.loads(path.read_text())
    data["opinfo_sample"] = stored.to_json()
    _replace(path, data)
    return True


def _opinfo_sample_of(case: Case) -> StoredSample | None:
    """The call of the case's OpInfo target as this process builds it, for its
    record; None for another target, or one whose call cannot be stored or is
    not the case's (its record names it by index only, as before records
    stored samples)."""
    try:
        stored = stored_sample_of(case.target)  # built already by whoever fuzzed it
    except (KeyError, SampleError):  # TargetUnavailable is a KeyError
        return None
    if stored is None:
        return None
    return stored if [tuple(t.shape) for t in stored.fuzzed] == [tuple(a.shape) for a in case.args] else None


def write_record(
    root: Path | str,
    check: str,
    case: Case,
    verdict: Verdict,
    status: str = "open",
    definition: Mapping[str, Any] | None = None,
    blame: Mapping[str, Any] | None = None,
    opinfo_sample: StoredSample | None = None,
) -> tuple[Path, bool]:
    """Write the record unless one with the same signature exists.

    Returns ``(path, created)``; safe under any number of concurrent writers.
    ``definition`` rebuilds a user target that is not importable as a Target
    (fuzzdiff.targets.user.definition); ``blame`` says whose bug it is
    (fuzzdiff.search.blame.Blame.to_json); ``opinfo_sample`` is an OpInfo target's
    call (default: its target's, as this process builds it).
    """
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    sig = signature(check, case, verdict)
    folder = Path(root) / check / _safe(case.target)
    path = folder / f"{_record_id(sig)}.json"
    if path.exists():
        return path, False
    if opinfo_sample is None:
        opinfo_sample = _opinfo_sample_of(case)
    record = Record(
        _record_id(sig), check, case, verdict, status, definition=definition, blame=blame, opinfo_sample=opinfo_sample
    )
    folder.mkdir(parents=True, exist_ok=True)
    storages = {i: t.detach().cpu() for i, t in case.storages().items()}
    big = {f"args.{i}": t.contiguous() for i, t in storages.items() if t.numel() > INLINE_LIMIT}
    big.update({STATE_KEY + n: t.contiguous() for n, t in module_state(definition).items() if t.numel() > INLINE_LIMIT})
    data_file, made_data = None, False
    if big:
        blob = save(big)
        # Named by content: concurrent writers of one id never point at each other's data.
        data_file = f"{record.id}.{hashlib.sha256(blob).hexdigest()[:12]}.safetensors"
        made_data = _publish(folder, data_file, blob)
    text = json.dumps(record.to_json(storages, data_file), indent=1, sort_keys=True) + "\n"
    created = _publish(folder, path.name, text.encode())
    if not created and made_data and data_file is not None and data_file not in path.read_text():
        (folder / data_file).unlink(missing_ok=True)  # the winner's record has its own data
    return path, created


def _publish(folder: Path, name: str, blob: bytes) -> bool:
    """Write ``folder/name`` whole or not at all; False if it already exists."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, folder / name)  # atomic, and fails if another writer got there first
            return True
        except FileExistsError:
            return False
    finally:
        os.unlink(tmp)


def _safe(name: str) -> str:
    """A target name as a folder name (user targets are ``module:qualname``)."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


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
    return record_from_json(data, path)


def rewrite_record(record: Record, verdict: Verdict) -> Path:
    """Write ``record`` again in place, in this format and draw scheme, with
    ``verdict``: its id, path, stored values and status kept. For moving a
    corpus to a new format; a record whose failure changed kind is a new
    failure, and ``write_record``'s to make."""
    if record.path is None:
        raise ValueError("the record has no path")
    if verdict.kind != record.verdict.kind:
        raise ValueError(f"{record.path}: recorded {record.verdict.kind}, the new verdict is {verdict.kind}")
    path = Path(record.path)
    storages = replace(record.case, device="cpu").storages()  # the stored values, wherever the case runs
    old = json.loads(path.read_text())
    new = replace(record, verdict=verdict).to_json(storages)
    for i, arg in enumerate(old["inputs"]):  # values in a data file: the same values, the same file
        if isinstance(arg.get("storage"), dict) and "file" in arg["storage"]:
            new["inputs"][i]["storage"] = arg["storage"]
    for key in ("signature", "found_with", "definition", "opinfo_sample"):  # what it was found as, with, and of
        if key in old:
            new[key] = old[key]
    _replace(path, new)
    return path


def _replace(path: Path, data: Mapping[str, Any]) -> None:
    """Write a record's JSON over its file, atomically: a reader sees the old record or the new one."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.chmod(tmp, path.stat().st_mode)
    os.replace(tmp, path)


def find_record(root: Path | str, ref: str) -> Path:
    """A record by path, or by id (or a unique id prefix) under ``root``."""
    if ref.endswith(".json") or os.sep in ref:
        return Path(ref)
    matches = [p for p in iter_records(root) if p.stem.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise CorpusError(f"no record with id {ref!r} under {root}")
    raise CorpusError(f"id {ref!r} is ambiguous under {root}: " + ", ".join(p.stem for p in matches[:5]))


def iter_records(root: Path | str) -> Iterator[Path]:
    """Every ``*.json`` record under ``root``, sorted by path (README files skipped)."""
    yield from sorted(Path(root).glob("*/*/*.json"))


def _data_files(data: dict) -> set[str]:
    """The data files beside a record (JSON) that it reads: inputs' and its module's state's."""
    entries = [v.get("storage", {}) for v in data["inputs"]]
    entries += list((data.get("definition") or {}).get("module", {}).get("state", {}).values())
    return {e["file"] for e in entries if isinstance(e, dict) and isinstance(e.get("file"), str)}


@dataclass
class Merge:
    """What ``merge`` did: records added, already present (same id), unreadable."""

    added: list[Path]
    present: list[Path]
    status_differs: list[tuple[Path, str, str]]  # (destination record, its status, the source's)
    unreadable: list[str]


def merge(sources: list[Path | str], dest: Path | str) -> Merge:
    """Copy every valid record of ``sources`` into ``dest``, deduplicated on id.

    Corpora collected on several machines name the same failure by the same id
    (a hash of its signature), so the first copy wins; a record is validated
    before it is copied, and copied whole (with its data file) or not at all.
    """
    result = Merge([], [], [], [])
    for source in sources:
        if not Path(source).is_dir():
            result.unreadable.append(f"{source}: not a directory")
            continue
        for path in iter_records(source):
            try:
                record = read_record(path)
            except CorpusError as e:
                result.unreadable.append(str(e))
                continue
            folder = Path(dest) / path.parent.parent.name / path.parent.name
            target = folder / path.name
            if target.exists():
                result.present.append(target)
                theirs = json.loads(target.read_text()).get("status")
                if theirs != record.status:
                    result.status_differs.append((target, theirs, record.status))
                continue
            folder.mkdir(parents=True, exist_ok=True)
            text = path.read_text()
            for data_file in _data_files(json.loads(text)):
                _publish(folder, data_file, (path.parent / data_file).read_bytes())
            (result.added if _publish(folder, path.name, text.encode()) else result.present).append(target)
    return result
