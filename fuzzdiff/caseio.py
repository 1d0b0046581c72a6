"""Reading a Case back from JSON, with errors that name the bad field.

Kept apart from case.py because validation is long and only replay needs it.
Nothing here runs code from the file: it is plain JSON, checked field by field.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from fuzzdiff.case import DTYPES, SPECIALS, Alias, Arg, Case, CaseError, Layout, Values

__all__ = ["case_from_json", "decode_floats"]


def decode_floats(x: Any) -> Any:
    """Undo the ``{"float": hex}`` encoding used for inf and nan."""
    if isinstance(x, dict):
        if set(x) == {"float"} and isinstance(x["float"], str):
            return float.fromhex(x["float"])
        return {k: decode_floats(v) for k, v in x.items()}
    if isinstance(x, list):
        return [decode_floats(v) for v in x]
    return x


def _get(data: Mapping, key: str, where: str, types, default=...):
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


def _ints(value, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise CaseError(f"{where}: expected a list of integers, got {value!r}")
    return tuple(value)


def _floats(value: list, where: str) -> tuple[float, ...]:
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        raise CaseError(f"{where}: expected a list of numbers, got {value!r}")
    return tuple(float(v) for v in value)


def _values(d: Mapping, where: str) -> Values:
    specials = []
    for k, item in enumerate(_get(d, "specials", where, list, [])):
        if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], int)
                or item[1] not in SPECIALS):
            raise CaseError(f"{where}.specials[{k}]: expected [position, one of {SPECIALS}], got {item!r}")
        specials.append((item[0], item[1]))
    kind = _get(d, "kind", where, str, "float")
    if kind not in ("float", "int", "bool"):
        raise CaseError(f"{where}.kind: expected 'float', 'int' or 'bool', got {kind!r}")
    grid = _get(d, "grid", where, (int, float, type(None)), None)
    low, high = _get(d, "low", where, float, -2.0), _get(d, "high", where, float, 2.0)
    if not (math.isfinite(low) and math.isfinite(high) and low <= high):
        raise CaseError(f"{where}: need finite low <= high, got [{low}, {high}]")
    return Values(
        seed=_get(d, "seed", where, int, 0), low=low, high=high,
        grid=None if grid is None else float(grid), specials=tuple(specials),
        avoid=_floats(_get(d, "avoid", where, list, []), f"{where}.avoid"),
        margin=_get(d, "margin", where, float, 0.0),
        distinct=_get(d, "distinct", where, bool, False), kind=kind,
        nudge=_get(d, "nudge", where, float, 0.0), nudge_seed=_get(d, "nudge_seed", where, int, 0),
        constant=_ints(_get(d, "constant", where, list, []), f"{where}.constant"))


def _arg(d: Mapping, where: str) -> Arg:
    shape = _ints(_get(d, "shape", where, list), f"{where}.shape")
    if any(s < 0 for s in shape):
        raise CaseError(f"{where}.shape: negative size in {list(shape)}")
    layout = _get(d, "layout", where, (dict, type(None)), None)
    if layout is not None:
        lw = f"{where}.layout"
        layout = Layout(_get(layout, "storage_size", lw, int),
                        _ints(_get(layout, "strides", lw, list), f"{lw}.strides"),
                        _get(layout, "offset", lw, int, 0))
        layout.check(shape, lw)
    alias = _get(d, "alias", where, (dict, type(None)), None)
    if alias is not None:
        aw = f"{where}.alias"
        kind = _get(alias, "kind", aw, str)
        if kind not in ("same", "view"):
            raise CaseError(f"{aw}.kind: expected 'same' or 'view', got {kind!r}")
        alias = Alias(_get(alias, "of", aw, int), kind)
    grad = _get(d, "grad", where, str, "leaf")
    if grad not in ("leaf", "view", "none"):
        raise CaseError(f"{where}.grad: expected 'leaf', 'view' or 'none', got {grad!r}")
    dtype = _get(d, "dtype", where, (str, type(None)), None)
    if dtype is not None and dtype not in DTYPES:
        raise CaseError(f"{where}.dtype: unknown dtype {dtype!r}")
    return Arg(shape, _values(_get(d, "values", where, dict, {}), f"{where}.values"),
               layout, alias, grad, dtype)


def case_from_json(data: Mapping, where: str = "case") -> Case:
    data = decode_floats(data)
    args = _get(data, "args", where, list)
    dtype = _get(data, "dtype", where, str, "float64")
    if dtype not in DTYPES:
        raise CaseError(f"{where}.dtype: unknown dtype {dtype!r}; expected one of {sorted(DTYPES)}")
    case = Case(
        target=_get(data, "target", where, str),
        args=tuple(_arg(a, f"{where}.args[{i}]") for i, a in enumerate(args)),
        dtype=dtype,
        device=_get(data, "device", where, str, "cpu"),
        kwargs=_get(data, "kwargs", where, dict, {}),
        params=_get(data, "params", where, dict, {}),
    )
    for i, a in enumerate(case.args):
        if a.alias is not None and not 0 <= a.alias.of < i:
            raise CaseError(f"{where}.args[{i}].alias.of: must name an earlier argument, got {a.alias.of}")
    return case
