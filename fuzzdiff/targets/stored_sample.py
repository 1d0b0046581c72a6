"""An OpInfo sample as plain data, so that a corpus record can rebuild its call.

The record's data as much as the OpInfo wing's, it sits beside both: a record
is decoded without importing the wing (fuzzdiff.targets.opinfo).

A target ``opinfo/<op>@<index>`` is one ``SampleInput`` of one OpInfo
(fuzzdiff.targets.opinfo.build), but torch's sample lists change between releases:
under another torch the index names another call, or none. A record of such a
target therefore stores the call itself (its ``opinfo_sample`` field): the op's
name and variant, the sample's ``(input, args, kwargs)`` with every constant
exact and a marker ``{"arg": i}`` where fuzzed argument ``i`` goes, the sample's
values of the fuzzed arguments (what ``near`` mode adds to, and what the
target's intervals come from), whether the target perturbs the sample
(``near``), and the output processing: the identity, or the sample's own
``output_process_fn_grad`` (code, so not stored: found again among the current
samples by their arguments), with the mask of the outputs autograd
differentiates (``keep``).

Decoding reads JSON and builds only these leaves: None, bool, int, float
(``{"float": hex}``), complex, str, a dtype, a memory format, a device, a slice,
Ellipsis and small tensors stored exactly (``float.hex`` per element, as a
record's inputs are). Names are looked up in fixed tables, never by attribute
access on a module: decoding imports and runs nothing. Containers are tuples,
lists, dicts (as ``[key, value]`` pairs, so their order survives a JSON writer
that sorts keys) and ``torch.Size``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from fuzzdiff.errors import FuzzdiffError

__all__ = ["TENSOR_LIMIT", "OUTPUTS", "SampleError", "Fuzzed", "StoredSample", "same_value", "near_value"]

TENSOR_LIMIT = 4096  # elements of one stored tensor
OUTPUTS = ("identity", "processed")  # the sample's output_process_fn_grad: the identity, or its own

_DTYPES = {
    name: getattr(torch, name)
    for name in (
        "float64",
        "float32",
        "float16",
        "bfloat16",
        "complex128",
        "complex64",
        "complex32",
        "int64",
        "int32",
        "int16",
        "int8",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "bool",
    )
    if isinstance(getattr(torch, name, None), torch.dtype)
}
_DTYPE_NAMES = {d: n for n, d in _DTYPES.items()}
_MEMORY_FORMATS = {
    name: getattr(torch, name) for name in ("contiguous_format", "channels_last", "channels_last_3d", "preserve_format")
}
_MEMORY_FORMAT_NAMES = {f: n for n, f in _MEMORY_FORMATS.items()}
_DEVICE_TYPES = ("cpu", "cuda", "meta")


class SampleError(FuzzdiffError, ValueError):
    """A stored sample that cannot be read, or a call that cannot be stored; ``where`` names the field."""

    def __init__(self, where: str, why: str):
        super().__init__(f"{where}: {why}")
        self.where = where
        self.why = why


@dataclass(frozen=True)
class Fuzzed:
    """Where fuzzed argument ``index`` goes in a stored call."""

    index: int


@dataclass(frozen=True, eq=False)
class StoredSample:
    """One OpInfo sample's call, as a record stores it (see the module's docstring).

    ``index`` is the sample's position in ``op.sample_inputs`` when it was
    stored: a hint for finding it again, never the sample's identity.
    """

    op: str
    variant: str
    index: int
    call: tuple  # (input, args, kwargs), Fuzzed(i) where fuzzed argument i goes
    fuzzed: tuple[torch.Tensor, ...]  # the sample's own values of each fuzzed argument
    near: bool  # each argument is the sample's value plus the fuzzed one
    output: str = "identity"
    keep: tuple[bool, ...] | None = None  # output leaves kept (fuzzdiff.targets.opinfo.call.Differentiable)

    def __post_init__(self) -> None:
        if self.output not in OUTPUTS:
            raise SampleError("output", f"{self.output!r}; expected one of {OUTPUTS}")

    @property
    def key(self) -> str:
        """The op key (fuzzdiff.targets.opinfo.tables.op_key: ``name`` or ``name.variant``)."""
        return f"{self.op}.{self.variant}" if self.variant else self.op

    def to_json(self) -> dict:
        return {
            "op": self.op,
            "variant": self.variant,
            "index": self.index,
            "call": encode(self.call, "call"),
            "fuzzed": [_tensor_json(t, f"fuzzed[{i}]", dense_only=self.near) for i, t in enumerate(self.fuzzed)],
            "near": self.near,
            "output": self.output,
            "keep": None if self.keep is None else list(self.keep),
        }

    @classmethod
    def from_json(cls, data: Any) -> StoredSample:
        """Validate and decode; SampleError names the field (relative to the sample)."""
        if not isinstance(data, dict):
            raise SampleError("", f"must be an object, got {type(data).__name__}")
        unknown = set(data) - {"op", "variant", "index", "call", "fuzzed", "near", "output", "keep"}
        if unknown:
            raise SampleError(sorted(unknown)[0], "unknown field")
        op = _get(data, "op", str)
        variant = _get(data, "variant", str)
        index = _get(data, "index", int)
        if index < 0:
            raise SampleError("index", f"must be a sample index (>= 0), got {index}")
        call = decode(_get(data, "call", dict), "call")
        if not (
            isinstance(call, tuple) and len(call) == 3 and isinstance(call[1], tuple) and isinstance(call[2], dict)
        ):
            raise SampleError("call", "must be the tuple (input, args, kwargs), args a tuple and kwargs a dict")
        if not all(isinstance(k, str) for k in call[2]):
            raise SampleError("call", "kwargs must have string keys")
        fuzzed = tuple(_tensor(t, f"fuzzed[{i}]") for i, t in enumerate(_get(data, "fuzzed", list)))
        markers = [m.index for m in _markers(call)]
        if markers != list(range(len(fuzzed))):
            raise SampleError(
                "call",
                f"the fuzzed arguments' markers are {markers}; expected each of 0..{len(fuzzed) - 1} "
                "once, in order (one per stored 'fuzzed' tensor)",
            )
        if not fuzzed:
            raise SampleError("fuzzed", "a sample has at least one fuzzed argument")
        if any(t.dtype != torch.float64 for t in fuzzed):
            raise SampleError("fuzzed", "the fuzzed arguments' sample values are float64")
        near = _get(data, "near", bool)
        output = _get(data, "output", str)
        if output not in OUTPUTS:
            raise SampleError("output", f"{output!r}; expected one of {OUTPUTS}")
        keep = data.get("keep")
        if keep is not None and not (
            isinstance(keep, list) and keep and all(isinstance(k, bool) for k in keep) and any(keep)
        ):
            raise SampleError("keep", f"must be null or a list of booleans, at least one true; got {keep!r}")
        return cls(op, variant, index, call, fuzzed, near, output, None if keep is None else tuple(keep))


def _get(data: dict, key: str, kind: type) -> Any:
    if key not in data:
        raise SampleError(key, "missing")
    value = data[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SampleError(key, f"must be {kind.__name__}, got {type(value).__name__}")
    return value


def _markers(x: Any) -> list[Fuzzed]:
    if isinstance(x, Fuzzed):
        return [x]
    if isinstance(x, (tuple, list)):
        return [m for v in x for m in _markers(v)]
    if isinstance(x, dict):
        return [m for v in x.values() for m in _markers(v)]
    return []


# -- values -----------------------------------------------------------------------------------


def encode(x: Any, where: str) -> Any:
    """JSON for one value of a sample's call; SampleError for anything else."""
    if x is None or isinstance(x, (bool, int, str)):
        return x
    if isinstance(x, float):
        return {"float": x.hex()}
    if isinstance(x, complex):
        return {"complex": [x.real.hex(), x.imag.hex()]}
    if isinstance(x, Fuzzed):
        return {"arg": x.index}
    if isinstance(x, torch.dtype):
        if x not in _DTYPE_NAMES:
            raise SampleError(where, f"dtype {x} is not one a record stores")
        return {"dtype": _DTYPE_NAMES[x]}
    if isinstance(x, torch.memory_format):
        return {"memory_format": _MEMORY_FORMAT_NAMES[x]}
    if isinstance(x, torch.device):
        return {"device": str(x)}
    if isinstance(x, slice):
        parts = (x.start, x.stop, x.step)
        if not all(p is None or (isinstance(p, int) and not isinstance(p, bool)) for p in parts):
            raise SampleError(where, f"{x!r}: only slices of integers and None are stored")
        return {"slice": list(parts)}
    if x is Ellipsis:
        return {"ellipsis": True}
    if isinstance(x, torch.Tensor):
        return {"tensor": _tensor_json(x, where)}
    if type(x) is torch.Size:
        return {"size": list(x)}
    if type(x) is tuple:
        return {"tuple": [encode(v, f"{where}[{i}]") for i, v in enumerate(x)]}
    if type(x) is list:
        return [encode(v, f"{where}[{i}]") for i, v in enumerate(x)]
    if type(x) is dict:
        if not all(isinstance(k, str) for k in x):
            raise SampleError(where, "only dicts with string keys are stored")
        return {"dict": [[k, encode(v, f"{where}.{k}")] for k, v in x.items()]}
    raise SampleError(where, f"a {type(x).__name__} ({x!r:.60}) is not a value a record stores")


def decode(data: Any, where: str) -> Any:
    """The value ``encode`` wrote; SampleError names the field of anything else."""
    if data is None or isinstance(data, (bool, int, str)):
        return data
    if isinstance(data, list):
        return [decode(v, f"{where}[{i}]") for i, v in enumerate(data)]
    if not isinstance(data, dict) or len(data) != 1:
        raise SampleError(where, f"expected a value or an object with one key, got {_short(data)}")
    ((tag, value),) = data.items()
    if tag == "float":
        return _float(value, where)
    if tag == "complex":
        if not (isinstance(value, list) and len(value) == 2):
            raise SampleError(where, "a complex is [real, imag] as float.hex strings")
        return complex(_float(value[0], where), _float(value[1], where))
    if tag == "arg":
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise SampleError(where, f"'arg' must be a fuzzed argument's index, got {_short(value)}")
        return Fuzzed(value)
    if tag == "dtype":
        return _lookup(_DTYPES, value, where, "dtype")
    if tag == "memory_format":
        return _lookup(_MEMORY_FORMATS, value, where, "memory format")
    if tag == "device":
        if not isinstance(value, str) or value.partition(":")[0] not in _DEVICE_TYPES:
            raise SampleError(where, f"device {_short(value)}; expected one of {_DEVICE_TYPES} (with an index)")
        try:
            return torch.device(value)
        except RuntimeError:
            raise SampleError(where, f"{value!r} is not a device") from None
    if tag == "slice":
        if not (
            isinstance(value, list)
            and len(value) == 3
            and all(p is None or (isinstance(p, int) and not isinstance(p, bool)) for p in value)
        ):
            raise SampleError(where, "a slice is [start, stop, step], each an integer or null")
        return slice(*value)
    if tag == "ellipsis":
        if value is not True:
            raise SampleError(where, "'ellipsis' must be true")
        return Ellipsis
    if tag == "tensor":
        return _tensor(value, f"{where}.tensor")
    if tag == "size":
        if not isinstance(value, list) or not all(_size(n) for n in value):
            raise SampleError(where, "a size is a list of non-negative integers")
        return torch.Size(value)
    if tag == "tuple":
        if not isinstance(value, list):
            raise SampleError(where, "'tuple' must be a list")
        return tuple(decode(v, f"{where}[{i}]") for i, v in enumerate(value))
    if tag == "dict":
        if not isinstance(value, list) or not all(
            isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in value
        ):
            raise SampleError(where, "'dict' must be a list of [string key, value] pairs")
        keys = [k for k, _ in value]
        if len(set(keys)) != len(keys):
            raise SampleError(where, "a dict's keys repeat")
        return {k: decode(v, f"{where}.{k}") for k, v in value}
    raise SampleError(where, f"{tag!r} is not a kind of value a record stores")


def _short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def _size(n: Any) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 0


def _lookup(table: dict, name: Any, where: str, what: str) -> Any:
    if not isinstance(name, str) or name not in table:
        raise SampleError(where, f"{what} {_short(name)}; expected one of {sorted(table)}")
    return table[name]


def _float(value: Any, where: str) -> float:
    """A float from its ``float.hex`` string, exactly as ``float.hex`` writes it."""
    try:
        x = float.fromhex(value) if isinstance(value, str) else None
    except ValueError:
        x = None
    if x is None or x.hex() != value:
        raise SampleError(where, f"{_short(value)} is not a float.hex string")
    return x


# -- tensors ----------------------------------------------------------------------------------


def _dense_strides(t: torch.Tensor) -> bool:
    """``t``'s memory is exactly its elements, in some dim order: a copy that
    preserves the format (``t.to(..., copy=True)``, ``empty_like``) keeps its strides."""
    return torch.empty_like(t).stride() == t.stride()


def _tensor_json(t: torch.Tensor, where: str, dense_only: bool = False) -> dict:
    """A tensor exactly: its dtype, shape, values in row-major order (``float.hex`` per real
    component, integers as ints) and, when not contiguous, its strides. A tensor whose
    memory has gaps or overlaps is stored contiguous: the copy an OpInfo call makes of a
    constant is; ``dense_only`` refuses it instead (a sample tensor used as it is)."""
    if t.dtype not in _DTYPE_NAMES or t.layout != torch.strided:
        raise SampleError(where, f"a {t.dtype} {t.layout} tensor is not one a record stores")
    if t.is_conj() or t.is_neg():
        raise SampleError(where, "a tensor with a conjugate or negative bit is not one a record stores")
    if t.numel() > TENSOR_LIMIT:
        raise SampleError(where, f"a tensor of {t.numel()} elements; a record stores at most {TENSOR_LIMIT}")
    t = t.detach().cpu()
    dense = _dense_strides(t)
    if dense_only and not dense:
        raise SampleError(where, f"strides {t.stride()} leave gaps or overlap: the tensor cannot be stored exactly")
    values = torch.view_as_real(t) if t.dtype.is_complex else t
    if values.dtype.is_floating_point:
        data: list = [float.hex(v) for v in values.double().flatten().tolist()]
    else:
        data = values.long().flatten().tolist()
    out: dict[str, Any] = {"dtype": _DTYPE_NAMES[t.dtype], "shape": list(t.shape), "data": data}
    if dense and not t.is_contiguous():
        out["strides"] = list(t.stride())
    return out


def _tensor(data: Any, where: str) -> torch.Tensor:
    if not isinstance(data, dict):
        raise SampleError(where, "a tensor is an object with dtype, shape and data")
    unknown = set(data) - {"dtype", "shape", "data", "strides"}
    if unknown:
        raise SampleError(f"{where}.{sorted(unknown)[0]}", "unknown field")
    dtype = _lookup(_DTYPES, data.get("dtype"), f"{where}.dtype", "dtype")
    shape = data.get("shape")
    if not isinstance(shape, list) or not all(_size(n) for n in shape):
        raise SampleError(f"{where}.shape", "must be a list of non-negative integers")
    numel = math.prod(shape)
    if numel > TENSOR_LIMIT:
        raise SampleError(f"{where}.shape", f"{numel} elements; a record stores at most {TENSOR_LIMIT}")
    items = data.get("data")
    width = 2 if dtype.is_complex else 1
    if not isinstance(items, list) or len(items) != numel * width:
        raise SampleError(f"{where}.data", f"must be a list of {numel * width} values for {numel} {dtype} elements")
    if dtype.is_floating_point or dtype.is_complex:
        flat = torch.tensor([_float(v, f"{where}.data") for v in items], dtype=torch.float64)
        flat = torch.view_as_complex(flat.reshape(-1, 2)).to(dtype) if dtype.is_complex else flat.to(dtype)
    else:
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            raise SampleError(f"{where}.data", "must be integers")
        flat = torch.tensor(items, dtype=torch.int64).to(dtype)
        if flat.long().tolist() != items:
            raise SampleError(f"{where}.data", f"holds values that a {dtype} tensor cannot")
    values = flat.reshape(shape)
    strides = data.get("strides")
    if strides is None:
        return values
    if not (isinstance(strides, list) and len(strides) == len(shape) and all(_size(s) for s in strides)):
        raise SampleError(f"{where}.strides", f"must be {len(shape)} non-negative integers")
    offsets = torch.zeros((), dtype=torch.int64)
    for n, s in zip(shape, strides):
        offsets = offsets.unsqueeze(-1) + torch.arange(n) * s
    if not torch.equal(offsets.flatten().sort().values, torch.arange(numel)):
        raise SampleError(f"{where}.strides", f"{strides} leave gaps or overlap for shape {shape}")
    return torch.empty_strided(tuple(shape), tuple(strides), dtype=dtype).copy_(values)


def same_value(a: Any, b: Any) -> bool:
    """Two leaves of a call are the same: of one type, and equal (tensors bit for
    bit in dtype, shape and values, NaN equal to NaN; floats by their bits)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        pair = _comparable(a, b)
        if pair is None:
            return False
        a, b = pair
        if a.is_complex():
            a, b = torch.view_as_real(a), torch.view_as_real(b)
        if a.is_floating_point():
            return bool(((a == b) | (a.isnan() & b.isnan())).all())
        return torch.equal(a, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a.hex() == b.hex() or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


def near_value(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Two floating tensors are one sample's, computed on two machines: of one
    dtype and shape, and equal up to the last bits a kernel's rounding may
    move (linalg.eig's samples are products of matrices, whose float64 bits
    differ between CPUs)."""
    pair = _comparable(a, b)
    return pair is not None and torch.allclose(*pair, rtol=1e-12, atol=1e-12, equal_nan=True)


def _comparable(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Both tensors plain on the CPU, where they have one dtype, shape and layout; else None."""
    if a.dtype != b.dtype or a.shape != b.shape or a.layout != b.layout:
        return None
    return a.detach().cpu().resolve_conj().resolve_neg(), b.detach().cpu().resolve_conj().resolve_neg()
