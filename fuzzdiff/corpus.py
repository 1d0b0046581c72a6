"""Corpus records: shrunk failures as plain JSON files (docs/pages/design.md, contract 4).

One record per distinct failure at ``<root>/<check>/<target>/<id>.json``. The
id is a hash of the failure's signature (target, check, verdict kind and the
input properties that matter), so the same bug found by many workers, runs or
machines lands in one file. Records are written to a temporary file and then
hard-linked into place: a reader never sees a torn record, and of several
concurrent writers of one id exactly one wins and none is lost. Loading a
record parses JSON (and safetensors) and nothing else.

A record stores each argument's filled storage exactly, beside the seed
recipe it came from: as ``float.hex`` strings when small, in a safetensors
file beside the JSON when large; so are the parameters and buffers of a
user's module (``definition.module.state``, fuzzdiff.targets.recipe). Every other random tensor the check draws
(probes, batch examples, nudges, junk memory) comes from a counter-based
stream keyed by seeds in the record (``fuzzdiff.draws``, named in the
record's ``draws`` field), not from torch's generator: a record found with
one torch version replays bit for bit under another.

Format 1 records predate ``draws``: their probes came from torch's
generator, and replay redraws them under the current scheme (``Record.redrawn``).

A record of an OpInfo target also stores the sample's call (``opinfo_sample``,
fuzzdiff.targets.opinfo_sample): torch's sample lists change between
releases, and the target's name, ``opinfo/<op>@<index>``, only says where the
sample was in the list of the torch it was found with.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import hypothesis
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save

from fuzzdiff.case import DTYPES, Case, CaseError, case_from_json
from fuzzdiff.draws import SCHEME
from fuzzdiff.releases import RELEASE, fixed_by, release
from fuzzdiff.targets.opinfo_sample import SampleError, StoredSample
from fuzzdiff.verdict import KINDS, Verdict, error_shape
from fuzzdiff.version import __version__

__all__ = [
    "FORMAT",
    "STATUSES",
    "Record",
    "CorpusError",
    "signature",
    "error_shape",
    "write_record",
    "read_record",
    "rewrite_record",
    "iter_records",
    "default_root",
    "find_record",
    "merge",
    "Merge",
    "module_state",
    "mark",
    "store_opinfo_sample",
]

FORMAT = 2
TORCH_DRAWS = "torch-generator"  # the draws of a format-1 record
STATUSES = ("open", "fixed", "expected")
INLINE_LIMIT = 4096  # elements per storage stored inline as float.hex; more go to safetensors
STATE_KEY = "definition.module.state."  # a module's state tensor in the data file: this, then its name
OPINFO = "opinfo/"  # the prefix of an OpInfo target's name (fuzzdiff.targets.opinfo.PREFIX)


class CorpusError(ValueError):
    """A corpus file that cannot be read as a record; names the file and the field."""


def default_root(configured: Path | str | None) -> Path:
    """The corpus a command uses: the one its driver resolved (FuzzConfig.corpus:
    --corpus, else $FUZZDIFF_CORPUS), else ./corpus."""
    return Path("corpus") if configured is None else Path(configured)


def signature(check: str, case: Case, verdict: Verdict) -> dict:
    """What makes two failures the same: the properties of the shrunk inputs,
    and for an exception its type and message with the numbers taken out (two
    errors of one pair, say a size mismatch and an invalid shape, are two
    records; the same error at other sizes is one)."""
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
        features.update(f"structure:{name}" for name, _ in a.values.structure)
    sig = {
        "target": case.target,
        "check": check,
        "kind": verdict.kind,
        "dtype": case.dtype,
        "device": case.device,
        "features": sorted(features),
    }
    exception = verdict.errors.get("exception") if isinstance(verdict.errors, Mapping) else None
    if isinstance(exception, str):
        sig["error"] = f"{exception}: {error_shape(verdict)[:200]}"
    return sig


def _record_id(sig: Mapping) -> str:
    digest = hashlib.sha256(json.dumps(sig, sort_keys=True).encode()).hexdigest()
    return digest[:16]


def _versions() -> dict:
    return {"torch": torch.__version__, "hypothesis": hypothesis.__version__, "fuzzdiff": __version__}


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


def _encode(t: torch.Tensor) -> list:
    """Exact and JSON-safe: ``float.hex`` per real component, integers as ints."""
    if t.dtype.is_complex:
        t = torch.view_as_real(t)
    if t.dtype.is_floating_point:
        return [float.hex(v) for v in t.double().flatten().tolist()]
    return t.long().flatten().tolist()


def _decode(items: list, dtype: torch.dtype, numel: int, where: str) -> torch.Tensor:
    width = 2 if dtype.is_complex else 1
    if len(items) != numel * width:
        raise CorpusError(f"{where}: {len(items)} values for {numel} elements of {dtype}")
    if dtype.is_floating_point or dtype.is_complex:
        try:
            flat = torch.tensor([float.fromhex(v) for v in items], dtype=torch.float64)
        except (TypeError, ValueError):
            bad = next(v for v in items if not isinstance(v, str) or not _is_hex(v))
            raise CorpusError(f"{where}: {bad!r} is not a float.hex string") from None
        if dtype.is_complex:
            return torch.view_as_complex(flat.reshape(-1, 2)).to(dtype)
        return flat.to(dtype)
    if not all(isinstance(v, int) for v in items):
        raise CorpusError(f"{where}: expected integers")
    return torch.tensor(items, dtype=torch.int64).to(dtype)


def _is_hex(v: str) -> bool:
    try:
        float.fromhex(v)
        return True
    except ValueError:
        return False


@dataclass(frozen=True)
class Record:
    """A shrunk failure: the case (with its values pinned), the check and its verdict."""

    id: str
    check: str
    case: Case
    verdict: Verdict
    status: str = "open"
    found_with: Mapping[str, str] | None = None
    path: Path | None = None
    definition: Mapping[str, Any] | None = None  # a user target's fn, spec and domain
    draws: str = SCHEME  # what drew the random tensors that are not stored (fuzzdiff.draws)
    blame: Mapping[str, Any] | None = None  # whose bug it is, with the evidence (fuzzdiff.blame)
    fixed_in: str | None = None  # the first torch release the failure is gone in (status "fixed")
    reason: str | None = None  # why it is intended behaviour (status "expected"), citing the doc or decision
    opinfo_sample: StoredSample | None = None  # an OpInfo target's call, to rebuild it under any torch

    def status_on(self, version: str | None = None) -> str:
        """The status under torch ``version`` (default: the running one): a
        record fixed in a later release is still open on this one."""
        if self.status == "fixed" and self.fixed_in is not None and not fixed_by(self.fixed_in, version):
            return "open"
        return self.status

    @property
    def target(self) -> str:
        return self.case.target

    @property
    def redrawn(self) -> str | None:
        """A one-line note when a replay's probes are not the record's own
        (a format-1 record); None when they are."""
        if self.draws == SCHEME:
            return None
        return (
            f"a format-1 record: its inputs are the stored bits, its probes and batch examples "
            f"are redrawn under {SCHEME} (it was found with torch's generator)"
        )

    def to_json(self, storages: Mapping[int, torch.Tensor], data_file: str | None = None) -> dict:
        """The record; storages (and a module's state tensors) over
        INLINE_LIMIT elements are in ``data_file``."""
        case = self.case.to_json()
        inputs = case["args"]
        for i, t in storages.items():
            stored = {"dtype": str(t.dtype).removeprefix("torch."), "numel": t.numel()}
            if t.numel() > INLINE_LIMIT:
                stored.update(file=data_file, key=f"args.{i}")
            else:
                stored["data"] = _encode(t)
            inputs[i]["storage"] = stored
        extra: dict[str, Any] = (
            {} if self.definition is None else {"definition": _definition_json(self.definition, data_file)}
        )
        if self.blame is not None:
            extra["blame"] = dict(self.blame)
        if self.fixed_in is not None:
            extra["fixed_in"] = self.fixed_in
        if self.reason is not None:
            extra["reason"] = self.reason
        if self.opinfo_sample is not None:
            extra["opinfo_sample"] = self.opinfo_sample.to_json()
        return _clean(
            {
                **extra,
                "format": FORMAT,
                "draws": SCHEME,
                "id": self.id,
                "target": case["target"],
                "check": self.check,
                "dtype": case["dtype"],
                "device": case["device"],
                "inputs": inputs,
                "kwargs": case["kwargs"],
                "params": case["params"],
                "verdict": {"kind": self.verdict.kind, "message": self.verdict.message, "errors": self.verdict.errors},
                "status": self.status,
                "found_with": dict(self.found_with or _versions()),
                "signature": signature(self.check, self.case, self.verdict),
            }
        )


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
    another sample). OpInfoError or SampleError when it cannot be built or stored."""
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
    from fuzzdiff.targets.opinfo import get_opinfo_target, stored_sample  # op_db: seconds, once

    stored = stored_sample(get_opinfo_target(record.target))
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
    if not case.target.startswith(OPINFO):
        return None
    from fuzzdiff.targets.opinfo import get_opinfo_target, stored_sample  # built already by whoever fuzzed it

    try:
        stored = stored_sample(get_opinfo_target(case.target))
    except (KeyError, SampleError):  # OpInfoError is a KeyError
        return None
    return stored if [tuple(t.shape) for t in stored.fuzzed] == [tuple(a.shape) for a in case.args] else None


def _stored_sample(path: Path, data: Mapping, case: Case) -> StoredSample | None:
    """The record's ``opinfo_sample``, decoded (plain data: nothing is imported or run)."""
    stored = data.get("opinfo_sample")
    if stored is None:
        return None
    if not case.target.startswith(OPINFO):
        raise CorpusError(f"{path}: field 'opinfo_sample' belongs to an OpInfo target's record, not {case.target!r}")
    try:
        sample = StoredSample.from_json(stored)
    except SampleError as e:
        field = f"opinfo_sample.{e.where}".rstrip(".")
        raise CorpusError(f"{path}: field {field!r}: {e.why}") from None
    key = case.target.removeprefix(OPINFO).rpartition("@")[0]
    if sample.key != key:
        raise CorpusError(f"{path}: field 'opinfo_sample.op': a call of {sample.key!r}; the target is {case.target!r}")
    shapes = [tuple(t.shape) for t in sample.fuzzed]
    if shapes != [tuple(a.shape) for a in case.args]:
        raise CorpusError(
            f"{path}: field 'opinfo_sample.fuzzed': sample values of shapes {shapes}; "
            f"the record's inputs have {[tuple(a.shape) for a in case.args]}"
        )
    return sample


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
    (fuzzdiff.blame.Blame.to_json); ``opinfo_sample`` is an OpInfo target's
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


def module_state(definition: Mapping[str, Any] | None) -> Mapping[str, torch.Tensor]:
    """The parameters and buffers a module's recipe holds (``definition.module.state``,
    fuzzdiff.targets.recipe), by name; empty for any other definition."""
    module = definition.get("module") if definition else None
    state = module.get("state") if isinstance(module, Mapping) else None
    return state if isinstance(state, Mapping) else {}


def _definition_json(definition: Mapping[str, Any], data_file: str | None) -> dict:
    """The definition with its module's state stored as inputs are: exact,
    inline when small, else in ``data_file``."""
    state = module_state(definition)
    if not state:
        return dict(definition)
    stored = {}
    for name, t in state.items():
        entry: dict[str, Any] = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}
        if t.numel() > INLINE_LIMIT:
            entry.update(file=data_file, key=STATE_KEY + name)
        else:
            entry["data"] = _encode(t)
        stored[name] = entry
    return {**definition, "module": {**definition["module"], "state": stored}}


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


def _field(data: Mapping, key: str, path: Path, types: type | tuple[type, ...], where: str = "") -> Any:
    name = f"{where}.{key}" if where else key
    if not isinstance(data, Mapping):
        raise CorpusError(f"{path}: field {where!r} must be an object")
    if key not in data:
        raise CorpusError(f"{path}: missing field {name!r}")
    value = data[key]
    if not isinstance(value, types) or isinstance(value, bool) and types is int:
        raise CorpusError(f"{path}: field {name!r} has the wrong type ({type(value).__name__})")
    return value


def _pinned(path: Path, inputs: list) -> dict[int, torch.Tensor]:
    """The stored storages, by argument index (popped from ``inputs``)."""
    data: dict[int, torch.Tensor] = {}
    for i, arg in enumerate(inputs):
        if not isinstance(arg, dict) or "storage" not in arg:
            continue
        where = f"inputs[{i}].storage"
        stored = arg.pop("storage")
        name = _field(stored, "dtype", path, str, where)
        dtype = DTYPES.get(name)
        if dtype is None:
            raise CorpusError(f"{path}: field '{where}.dtype' is {name!r}; expected one of {sorted(DTYPES)}")
        numel = _field(stored, "numel", path, int, where)
        data[i] = _stored_tensor(path, stored, where, dtype, numel)
    return data


def _stored_tensor(path: Path, stored: Mapping, where: str, dtype: torch.dtype, numel: int) -> torch.Tensor:
    """A flat tensor stored inline (``data``) or in a data file beside the record (``file``, ``key``)."""
    if "data" in stored:
        return _decode(_field(stored, "data", path, list, where), dtype, numel, f"{path}: field '{where}.data'")
    file = path.parent / Path(_field(stored, "file", path, str, where)).name
    key = _field(stored, "key", path, str, where)
    if not file.exists():
        raise CorpusError(f"{path}: field '{where}.file': {file.name} is missing beside the record")
    try:
        t = load_file(file).get(key)
    except (SafetensorError, OSError) as e:
        raise CorpusError(f"{file}: not a readable safetensors file ({e})") from None
    if t is None or t.dtype != dtype or t.numel() != numel:
        raise CorpusError(f"{path}: field '{where}': {file.name} has no {dtype} tensor {key!r} of {numel} elements")
    return t.flatten()


def _stored_state(path: Path, definition: dict) -> dict:
    """``definition`` with its module's state (``module.state``) read back into tensors."""
    if "module" not in definition:
        return definition
    module = definition["module"]
    if not isinstance(module, dict):
        raise CorpusError(f"{path}: field 'definition.module' must be an object")
    stored = module.get("state", {})
    if not isinstance(stored, dict):
        raise CorpusError(f"{path}: field 'definition.module.state' must be an object")
    state = {}
    for name, entry in stored.items():
        where = f"definition.module.state.{name}"
        dtype_name = _field(entry, "dtype", path, str, where)
        dtype = DTYPES.get(dtype_name)
        if dtype is None:
            raise CorpusError(f"{path}: field '{where}.dtype' is {dtype_name!r}; expected one of {sorted(DTYPES)}")
        shape = _field(entry, "shape", path, list, where)
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
            raise CorpusError(f"{path}: field '{where}.shape' must be a list of sizes")
        state[name] = _stored_tensor(path, entry, where, dtype, math.prod(shape)).reshape(shape)
    return {**definition, "module": {**module, "state": state}}


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
    if fmt not in (1, FORMAT):
        raise CorpusError(f"{path}: field 'format' is {fmt}; this fuzzdiff reads formats 1 to {FORMAT}")
    draws = TORCH_DRAWS if fmt == 1 else _field(data, "draws", path, str)
    if fmt != 1 and draws != SCHEME:
        raise CorpusError(
            f"{path}: field 'draws' is {draws!r}; this fuzzdiff draws with {SCHEME!r} "
            f"and cannot replay the record's probes"
        )
    check = _field(data, "check", path, str)
    status = _field(data, "status", path, str)
    if status not in STATUSES:
        raise CorpusError(f"{path}: field 'status' is {status!r}; expected one of {STATUSES}")
    verdict = _field(data, "verdict", path, dict)
    kind = verdict.get("kind")
    if kind not in KINDS:
        raise CorpusError(f"{path}: field 'verdict.kind' is {kind!r}; expected one of {KINDS}")
    inputs = _field(data, "inputs", path, list)
    pinned = _pinned(path, inputs)
    try:
        case = case_from_json(
            {
                "target": _field(data, "target", path, str),
                "args": inputs,
                "dtype": _field(data, "dtype", path, str),
                "device": data.get("device", "cpu"),
                "kwargs": data.get("kwargs", {}),
                "params": data.get("params", {}),
            },
            where="record",
        )
    except CaseError as e:
        raise CorpusError(f"{path}: field {str(e).replace('record.args', 'inputs').replace('record.', '')}") from None
    for i, t in pinned.items():
        lay, dtype = case.args[i].strided, case.arg_dtype(i)
        if case.owner(i) != i:
            raise CorpusError(f"{path}: field 'inputs[{i}].storage': argument {i} is an alias and owns no storage")
        if t.numel() != lay.storage_size or t.dtype != dtype:
            raise CorpusError(
                f"{path}: field 'inputs[{i}].storage' holds {t.numel()} {t.dtype} "
                f"values; the layout needs {lay.storage_size} {dtype}"
            )
    definition = data.get("definition")
    if definition is not None and not isinstance(definition, dict):
        raise CorpusError(f"{path}: field 'definition' must be an object")
    if definition is not None:
        definition = _stored_state(path, definition)
    blame = data.get("blame")
    if blame is not None and not (isinstance(blame, dict) and isinstance(blame.get("whose"), str)):
        raise CorpusError(f"{path}: field 'blame' must be an object with a string 'whose'")
    fixed_in = data.get("fixed_in")
    if fixed_in is not None and not (isinstance(fixed_in, str) and RELEASE.fullmatch(fixed_in)):
        raise CorpusError(f"{path}: field 'fixed_in' must be a torch release such as '2.14.1', got {fixed_in!r}")
    if fixed_in is not None and status != "fixed":
        raise CorpusError(f"{path}: field 'fixed_in' belongs to a 'fixed' record; this one is {status!r}")
    reason = data.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise CorpusError(f"{path}: field 'reason' must be a string, got {type(reason).__name__}")
    if reason is not None and status != "expected":
        raise CorpusError(f"{path}: field 'reason' belongs to an 'expected' record; this one is {status!r}")
    return Record(
        _field(data, "id", path, str),
        check,
        replace(case, data=pinned),
        Verdict(kind, str(verdict.get("message", "")), dict(verdict.get("errors") or {})),
        status,
        data.get("found_with"),
        path,
        definition,
        draws,
        blame,
        fixed_in,
        reason,
        opinfo_sample=_stored_sample(path, data, case),
    )


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
