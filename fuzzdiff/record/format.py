"""The corpus record's format (docs/pages/design.md, contract 4): a Record <-> JSON, a Case <-> JSON.

A record is a shrunk failure: its case, check and verdict, its status, what it
was found with, and for a user's target the definition that rebuilds it. It
stores each argument's filled storage exactly, beside the seed recipe it came
from: as ``float.hex`` strings when small, in a safetensors file beside the JSON
when large; so are the parameters and buffers of a user's module
(``definition.module.state``, fuzzdiff.targets.recipe). Every other random
tensor the check draws (probes, batch examples, nudges, junk memory) comes from
a counter-based stream keyed by seeds in the record (``fuzzdiff.case.draws``, named
in the record's ``draws`` field), not from torch's generator: a record found
with one torch version replays bit for bit under another.

Format 1 records predate ``draws``: their probes came from torch's
generator, and replay redraws them under the current scheme (``Record.redrawn``).

A record of an OpInfo target also stores the sample's call (``opinfo_sample``,
fuzzdiff.targets.stored_sample): torch's sample lists change between
releases, and the target's name, ``opinfo/<op>@<index>``, only says where the
sample was in the list of the torch it was found with.

Decoding reads plain JSON (and safetensors) and nothing else: it runs no code
from the file, checks it field by field, and a bad field is an error that
names it (``CorpusError`` for a record, ``CaseError`` for a case). Where the
files live, and how they are written, is fuzzdiff.record.files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import hypothesis
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from fuzzdiff.case.case import DTYPES, Arg, Case
from fuzzdiff.case.draws import SCHEME
from fuzzdiff.case.layout import Alias, CaseError, Layout
from fuzzdiff.case.structures import STRUCTURES
from fuzzdiff.case.values import SPECIALS, Values
from fuzzdiff.errors import FuzzdiffError
from fuzzdiff.targets.releases import RELEASE, fixed_by
from fuzzdiff.targets.stored_sample import SampleError, StoredSample
from fuzzdiff.verdict import KINDS, Verdict, error_shape
from fuzzdiff.version import __version__

__all__ = [
    "FORMAT",
    "STATUSES",
    "INLINE_LIMIT",
    "STATE_KEY",
    "OPINFO",
    "Record",
    "CorpusError",
    "signature",
    "module_state",
    "record_from_json",
    "case_from_json",
    "decode_floats",
]

FORMAT = 2
TORCH_DRAWS = "torch-generator"  # the draws of a format-1 record
STATUSES = ("open", "fixed", "expected")
INLINE_LIMIT = 4096  # elements per storage stored inline as float.hex; more go to safetensors
STATE_KEY = "definition.module.state."  # a module's state tensor in the data file: this, then its name
OPINFO = "opinfo/"  # the prefix of an OpInfo target's name (fuzzdiff.targets.opinfo.adapter.PREFIX)


class CorpusError(FuzzdiffError, ValueError):
    """A corpus file that cannot be read as a record; names the file and the field."""


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
    draws: str = SCHEME  # what drew the random tensors that are not stored (fuzzdiff.case.draws)
    blame: Mapping[str, Any] | None = None  # whose bug it is, with the evidence (fuzzdiff.search.blame)
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


# -- reading a record back ----------------------------------------------------


def record_from_json(data: Any, path: Path) -> Record:
    """The record a record file's parsed JSON holds, validated field by field:
    ``path`` is that file, which a CorpusError names, and beside which a large
    storage's data file lies."""
    if not isinstance(data, dict):
        raise CorpusError(f"{path}: a record is a JSON object, got {type(data).__name__}")
    try:
        return _record(data, path)
    except CaseError as e:
        # the field's name as the record spells it: its cases' ``args`` are its ``inputs``
        name, _, why = str(e).partition(": ")
        name = name.replace("record.args", "inputs").removeprefix("record.")
        raise CorpusError(f"{path}: field {name!r}: {why}") from None


def _record(data: dict, path: Path) -> Record:
    fmt = _field(data, "format", "record", int)
    if fmt not in (1, FORMAT):
        raise CorpusError(f"{path}: field 'format' is {fmt}; this fuzzdiff reads formats 1 to {FORMAT}")
    draws = TORCH_DRAWS if fmt == 1 else _field(data, "draws", "record", str)
    if fmt != 1 and draws != SCHEME:
        raise CorpusError(
            f"{path}: field 'draws' is {draws!r}; this fuzzdiff draws with {SCHEME!r} "
            f"and cannot replay the record's probes"
        )
    check = _field(data, "check", "record", str)
    status = _field(data, "status", "record", str)
    if status not in STATUSES:
        raise CorpusError(f"{path}: field 'status' is {status!r}; expected one of {STATUSES}")
    verdict = _field(data, "verdict", "record", dict)
    kind = verdict.get("kind")
    if kind not in KINDS:
        raise CorpusError(f"{path}: field 'verdict.kind' is {kind!r}; expected one of {KINDS}")
    inputs = _field(data, "inputs", "record", list)
    pinned = _pinned(path, inputs)
    case = case_from_json(
        {
            "target": _field(data, "target", "record", str),
            "args": inputs,
            "dtype": _field(data, "dtype", "record", str),
            "device": data.get("device", "cpu"),
            "kwargs": data.get("kwargs", {}),
            "params": data.get("params", {}),
        },
        where="record",
    )
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
        _field(data, "id", "record", str),
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


def _pinned(path: Path, inputs: list) -> dict[int, torch.Tensor]:
    """The stored storages, by argument index (popped from ``inputs``)."""
    data: dict[int, torch.Tensor] = {}
    for i, arg in enumerate(inputs):
        if not isinstance(arg, dict) or "storage" not in arg:
            continue
        where = f"inputs[{i}].storage"
        stored = arg.pop("storage")
        name = _field(stored, "dtype", where, str)
        dtype = DTYPES.get(name)
        if dtype is None:
            raise CorpusError(f"{path}: field '{where}.dtype' is {name!r}; expected one of {sorted(DTYPES)}")
        numel = _field(stored, "numel", where, int)
        data[i] = _stored_tensor(path, stored, where, dtype, numel)
    return data


def _stored_tensor(path: Path, stored: Mapping, where: str, dtype: torch.dtype, numel: int) -> torch.Tensor:
    """A flat tensor stored inline (``data``) or in a data file beside the record (``file``, ``key``)."""
    if "data" in stored:
        return _decode(_field(stored, "data", where, list), dtype, numel, f"{path}: field '{where}.data'")
    file = path.parent / Path(_field(stored, "file", where, str)).name
    key = _field(stored, "key", where, str)
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
        dtype_name = _field(entry, "dtype", where, str)
        dtype = DTYPES.get(dtype_name)
        if dtype is None:
            raise CorpusError(f"{path}: field '{where}.dtype' is {dtype_name!r}; expected one of {sorted(DTYPES)}")
        shape = _field(entry, "shape", where, list)
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
            raise CorpusError(f"{path}: field '{where}.shape' must be a list of sizes")
        state[name] = _stored_tensor(path, entry, where, dtype, math.prod(shape)).reshape(shape)
    return {**definition, "module": {**module, "state": state}}


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


# -- reading a Case back from JSON ------------------------------------------------
#
# A case's recipe as Case.to_json writes it, in a record's ``inputs`` or a
# journal; a bad field is a CaseError that names it.


def decode_floats(x: Any) -> Any:
    """Undo the ``{"float": hex}`` encoding used for inf and nan."""
    if isinstance(x, dict):
        if set(x) == {"float"} and isinstance(x["float"], str):
            return float.fromhex(x["float"])
        return {k: decode_floats(v) for k, v in x.items()}
    if isinstance(x, list):
        return [decode_floats(v) for v in x]
    return x


def _field(data: Any, key: str, where: str, types: Any, default: Any = ...) -> Any:
    """``data[key]``, one of ``types`` (None: any; an int is a float too, a
    bool neither), or ``default`` where it is absent (none given: required).
    ``where`` names ``data``: a CaseError names the field ``where.key``, and
    a record's reader adds its file."""
    if not isinstance(data, Mapping):
        raise CaseError(f"{where}: expected an object, got {type(data).__name__}")
    if key not in data:
        if default is ...:
            raise CaseError(f"{where}.{key}: missing field")
        return default
    value = data[key]
    if types is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if types is not None and not isinstance(value, types) or isinstance(value, bool) and types in (int, float):
        raise CaseError(f"{where}.{key}: expected {getattr(types, '__name__', types)}, got {value!r}")
    return value


def _ints(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise CaseError(f"{where}: expected a list of integers, got {value!r}")
    return tuple(value)


def _floats(value: list[Any], where: str) -> tuple[float, ...]:
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        raise CaseError(f"{where}: expected a list of numbers, got {value!r}")
    return tuple(float(v) for v in value)


def _values(d: Mapping[str, Any], where: str) -> Values:
    specials = []
    for k, item in enumerate(_field(d, "specials", where, list, [])):
        if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], int) or item[1] not in SPECIALS:
            raise CaseError(f"{where}.specials[{k}]: expected [position, one of {SPECIALS}], got {item!r}")
        specials.append((item[0], item[1]))
    kind = _field(d, "kind", where, str, "float")
    if kind not in ("float", "int", "bool"):
        raise CaseError(f"{where}.kind: expected 'float', 'int' or 'bool', got {kind!r}")
    grid = _field(d, "grid", where, (int, float, type(None)), None)
    low, high = _field(d, "low", where, float, -2.0), _field(d, "high", where, float, 2.0)
    if not (math.isfinite(low) and math.isfinite(high) and low <= high):
        raise CaseError(f"{where}: need finite low <= high, got [{low}, {high}]")
    return Values(
        seed=_field(d, "seed", where, int, 0),
        low=low,
        high=high,
        grid=None if grid is None else float(grid),
        specials=tuple(specials),
        avoid=_floats(_field(d, "avoid", where, list, []), f"{where}.avoid"),
        margin=_field(d, "margin", where, float, 0.0),
        distinct=_field(d, "distinct", where, bool, False),
        kind=kind,
        nudge=_field(d, "nudge", where, float, 0.0),
        nudge_seed=_field(d, "nudge_seed", where, int, 0),
        constant=_ints(_field(d, "constant", where, list, []), f"{where}.constant"),
        structure=_structure(_field(d, "structure", where, list, []), f"{where}.structure"),
        nudge_off=_field(d, "nudge_off", where, bool, False),
    )


def _structure(items: list[Any], where: str) -> tuple[tuple[str, int], ...]:
    out = []
    for k, item in enumerate(items):
        if (
            not isinstance(item, list)
            or len(item) != 2
            or item[0] not in STRUCTURES
            or not isinstance(item[1], int)
            or isinstance(item[1], bool)
            or item[1] < 0
        ):
            raise CaseError(f"{where}[{k}]: expected [one of {STRUCTURES}, a non-negative integer], got {item!r}")
        out.append((item[0], item[1]))
    return tuple(out)


def _arg(d: Mapping[str, Any], where: str) -> Arg:
    shape = _ints(_field(d, "shape", where, list), f"{where}.shape")
    if any(s < 0 for s in shape):
        raise CaseError(f"{where}.shape: negative size in {list(shape)}")
    layout = _field(d, "layout", where, (dict, type(None)), None)
    if layout is not None:
        lw = f"{where}.layout"
        layout = Layout(
            _field(layout, "storage_size", lw, int),
            _ints(_field(layout, "strides", lw, list), f"{lw}.strides"),
            _field(layout, "offset", lw, int, 0),
        )
        layout.check(shape, lw)
    alias = _field(d, "alias", where, (dict, type(None)), None)
    if alias is not None:
        aw = f"{where}.alias"
        kind = _field(alias, "kind", aw, str)
        if kind not in ("same", "view"):
            raise CaseError(f"{aw}.kind: expected 'same' or 'view', got {kind!r}")
        alias = Alias(_field(alias, "of", aw, int), kind)
    grad = _field(d, "grad", where, str, "leaf")
    if grad not in ("leaf", "view", "none"):
        raise CaseError(f"{where}.grad: expected 'leaf', 'view' or 'none', got {grad!r}")
    dtype = _field(d, "dtype", where, (str, type(None)), None)
    if dtype is not None and dtype not in DTYPES:
        raise CaseError(f"{where}.dtype: unknown dtype {dtype!r}")
    return Arg(shape, _values(_field(d, "values", where, dict, {}), f"{where}.values"), layout, alias, grad, dtype)


def case_from_json(data: Mapping[str, Any], where: str = "case") -> Case:
    data = decode_floats(data)
    args = _field(data, "args", where, list)
    dtype = _field(data, "dtype", where, str, "float64")
    if dtype not in DTYPES:
        raise CaseError(f"{where}.dtype: unknown dtype {dtype!r}; expected one of {sorted(DTYPES)}")
    case = Case(
        target=_field(data, "target", where, str),
        args=tuple(_arg(a, f"{where}.args[{i}]") for i, a in enumerate(args)),
        dtype=dtype,
        device=_field(data, "device", where, str, "cpu"),
        kwargs=_field(data, "kwargs", where, dict, {}),
        params=_field(data, "params", where, dict, {}),
        copies=_ints(_field(data, "copies", where, list, []), f"{where}.copies"),
    )
    if any(not 0 <= i < len(case.args) for i in case.copies):
        raise CaseError(f"{where}.copies: argument indices in [0, {len(case.args)}), got {list(case.copies)}")
    for i, a in enumerate(case.args):
        if a.alias is not None and not 0 <= a.alias.of < i:
            raise CaseError(f"{where}.args[{i}].alias.of: must name an earlier argument, got {a.alias.of}")
    return case
