"""Straight-line torch programs as plain data, and their interpreter.

A program is a list of statements over numbered values: values ``0 .. n-1``
are the inputs, and every statement appends one value (an in-place statement
appends the tensor it wrote, which is the same object as its operand). A
statement is a JSON object, e.g. ``{"op": "slice", "x": 0, "dim": 1,
"start": 1, "step": 2}``; ``x`` and ``other`` name values. Programs go into a
case's kwargs (and so into corpus records) as they are, replay without
Hypothesis, and print as plain torch code (``Program.source``).

The program returns every value a non-in-place statement made, in order:
views of inputs and of each other, later written through other views, are
what compilers find hardest to get right (regenerating an output view after
a mutation, synthetic bases for aliased inputs).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from fuzzdiff.errors import FuzzdiffError

__all__ = ["OPS", "Op", "Program", "FUNCTIONS", "run_program", "ProgramError"]


class ProgramError(FuzzdiffError, ValueError):
    """A program (or the JSON it came from) that does not describe valid statements."""


def _index(s: Mapping) -> tuple:
    return (slice(None),) * s["dim"] + (slice(s["start"], s.get("stop"), s["step"]),)


def _index_code(s: Mapping) -> str:
    stop = "" if s.get("stop") is None else str(s["stop"])
    return "[" + ":, " * s["dim"] + f"{s['start']}:{stop}:{s['step']}" + "]"


def _scalar_or(values: list, s: Mapping):
    return s["scalar"] if s.get("other") is None else values[s["other"]]


def _scalar_or_code(names: list[str], s: Mapping) -> str:
    return repr(s["scalar"]) if s.get("other") is None else names[s["other"]]


# Functional ops: the catalog's smooth, domain-free elementwise ops, called as
# the catalog calls them (fuzzdiff.targets.catalog.unary / binary).
FUNCTIONS: dict[str, tuple[Callable, str, int]] = {
    "sin": (torch.sin, "torch.sin", 1),
    "cos": (torch.cos, "torch.cos", 1),
    "tanh": (torch.tanh, "torch.tanh", 1),
    "sigmoid": (torch.sigmoid, "torch.sigmoid", 1),
    "atan": (torch.atan, "torch.atan", 1),
    "erf": (torch.erf, "torch.erf", 1),
    "square": (torch.square, "torch.square", 1),
    "silu": (F.silu, "F.silu", 1),
    "logsigmoid": (F.logsigmoid, "F.logsigmoid", 1),
    "add": (torch.add, "torch.add", 2),
    "mul": (torch.mul, "torch.mul", 2),
    "logaddexp": (torch.logaddexp, "torch.logaddexp", 2),
}


@dataclass(frozen=True)
class Op:
    """kind:  "view", "inplace" or "functional".
    run:   ``run(values, statement) -> tensor``.
    code:  ``code(names, statement) -> expression`` in plain torch.
    """

    kind: str
    run: Callable[[list, Mapping], torch.Tensor]
    code: Callable[[list[str], Mapping], str]
    fields: tuple[str, ...]


def _call(values, s):
    fn, _, arity = FUNCTIONS[s["fn"]]
    return fn(values[s["x"]], *([values[s["other"]]] if arity == 2 else []))


def _call_code(names, s):
    _, expr, arity = FUNCTIONS[s["fn"]]
    return f"{expr}({names[s['x']]}" + (f", {names[s['other']]})" if arity == 2 else ")")


def _shape(shape) -> str:
    return ", ".join(map(str, shape)) if shape else ""


OPS: dict[str, Op] = {
    "slice": Op(
        "view",
        lambda v, s: v[s["x"]][_index(s)],
        lambda n, s: n[s["x"]] + _index_code(s),
        ("dim", "start", "stop", "step"),
    ),
    "transpose": Op(
        "view",
        lambda v, s: v[s["x"]].transpose(s["dim0"], s["dim1"]),
        lambda n, s: f"{n[s['x']]}.transpose({s['dim0']}, {s['dim1']})",
        ("dim0", "dim1"),
    ),
    "select": Op(
        "view",
        lambda v, s: v[s["x"]].select(s["dim"], s["index"]),
        lambda n, s: f"{n[s['x']]}.select({s['dim']}, {s['index']})",
        ("dim", "index"),
    ),
    "view": Op(
        "view",
        lambda v, s: v[s["x"]].view(s["shape"]),
        lambda n, s: f"{n[s['x']]}.view({_shape(s['shape'])})" if s["shape"] else f"{n[s['x']]}.view(())",
        ("shape",),
    ),
    "expand": Op(
        "view",
        lambda v, s: v[s["x"]].expand(s["shape"]),
        lambda n, s: f"{n[s['x']]}.expand({_shape(s['shape'])})" if s["shape"] else f"{n[s['x']]}.expand(())",
        ("shape",),
    ),
    "add_": Op(
        "inplace",
        lambda v, s: v[s["x"]].add_(_scalar_or(v, s)),
        lambda n, s: f"{n[s['x']]}.add_({_scalar_or_code(n, s)})",
        ("other", "scalar"),
    ),
    "mul_": Op(
        "inplace",
        lambda v, s: v[s["x"]].mul_(_scalar_or(v, s)),
        lambda n, s: f"{n[s['x']]}.mul_({_scalar_or_code(n, s)})",
        ("other", "scalar"),
    ),
    "copy_": Op(
        "inplace",
        lambda v, s: v[s["x"]].copy_(v[s["other"]]),
        lambda n, s: f"{n[s['x']]}.copy_({n[s['other']]})",
        ("other",),
    ),
    "clamp_": Op(
        "inplace",
        lambda v, s: v[s["x"]].clamp_(s["min"], s["max"]),
        lambda n, s: f"{n[s['x']]}.clamp_({s['min']!r}, {s['max']!r})",
        ("min", "max"),
    ),
    "call": Op("functional", _call, _call_code, ("fn", "other")),
}


@dataclass(frozen=True)
class Program:
    """``inputs`` tensors in, ``body`` statements (JSON objects), every
    non-in-place statement's value out, as a tuple."""

    inputs: int
    body: tuple[Mapping[str, Any], ...]

    def __post_init__(self):
        if not isinstance(self.inputs, int) or self.inputs < 1:
            raise ProgramError(f"inputs must be a positive integer, got {self.inputs!r}")
        for k, s in enumerate(self.body):
            where = f"statement {k}"
            op = OPS.get(s.get("op", "")) if isinstance(s, Mapping) else None
            if op is None:
                raise ProgramError(f"{where}: unknown op {s!r}; expected one of {sorted(OPS)}")
            refs = [s.get("x"), *([s["other"]] if s.get("other") is not None else [])]
            if any(not isinstance(r, int) or not 0 <= r < self.inputs + k for r in refs):
                raise ProgramError(f"{where}: operands {refs} must name earlier values (0 .. {self.inputs + k - 1})")
            if s["op"] == "call" and s.get("fn") not in FUNCTIONS:
                raise ProgramError(f"{where}: unknown function {s.get('fn')!r}")

    @property
    def outputs(self) -> list[int]:
        """The values the program returns: those of its non-in-place statements."""
        return [self.inputs + k for k, s in enumerate(self.body) if OPS[s["op"]].kind != "inplace"]

    def kinds(self) -> set[str]:
        return {OPS[s["op"]].kind for s in self.body}

    @property
    def mutates(self) -> bool:
        return "inplace" in self.kinds()

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if len(inputs) != self.inputs:
            raise ProgramError(f"the program takes {self.inputs} inputs, got {len(inputs)}")
        values = list(inputs)
        for s in self.body:
            values.append(OPS[s["op"]].run(values, s))
        return tuple(values[k] for k in self.outputs)

    def source(self, name: str = "program", arg_names: Sequence[str] | None = None) -> str:
        """The program as a plain torch function definition."""
        names = list(arg_names or [f"x{i}" for i in range(self.inputs)])
        lines = [f"def {name}({', '.join(names)}):"]
        for k, s in enumerate(self.body):
            expr = OPS[s["op"]].code(names, s)
            if OPS[s["op"]].kind == "inplace":
                names.append(names[s["x"]])  # the same tensor, under its own name
                lines.append(f"    {expr}")
            else:
                names.append(f"v{k}")
                lines.append(f"    v{k} = {expr}")
        outs = [names[k] for k in self.outputs]
        lines.append(f"    return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")
        return "\n".join(lines) + "\n"

    # -- JSON ---------------------------------------------------------------------

    def to_json(self) -> dict:
        return {"inputs": self.inputs, "body": [dict(s) for s in self.body]}

    @staticmethod
    def from_json(data: Mapping | str) -> Program:
        if isinstance(data, str):
            data = json.loads(data)
        if not isinstance(data, Mapping) or "inputs" not in data or "body" not in data:
            raise ProgramError(f"a program is {{'inputs': n, 'body': [...]}}, got {data!r}")
        return Program(data["inputs"], tuple(dict(s) for s in data["body"]))


def run_program(*inputs: torch.Tensor, program: Mapping) -> tuple[torch.Tensor, ...]:
    """A program target's function: ``program`` is the JSON form (a case kwarg)."""
    return Program.from_json(program)(*inputs)


def _bind(program: Mapping) -> Program:
    return Program.from_json(program)


# fuzzdiff.paths.compiled compiles ``run_program.bind(**kwargs)``: the program's
# statements, not the parsing and validation of its JSON.
run_program.bind = _bind  # type: ignore[attr-defined]  # a function attribute, read by getattr
