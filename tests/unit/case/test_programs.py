"""Programs as data (fuzzdiff.case.programs) and their strategy (strategies.programs)."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import HealthCheck, find, given, settings, strategies as st
from hypothesis.errors import InvalidArgument

from fuzzdiff.case.programs import FUNCTIONS, OPS, Program, ProgramError, run_program
from strategies.programs import KINDS, programs

SETTINGS = settings(max_examples=25, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))
# derandomized: shrinking is a search; at a random seed it stops one statement short ~3% of the time
FIND = settings(max_examples=1000, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
SHAPES = [(3, 4), (3, 4)]


def inputs(shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes]


def _views(p: Program) -> set[int]:
    return {p.inputs + k for k, s in enumerate(p.body) if OPS[s["op"]].kind == "view"}


# -- the strategy reaches what the compile check needs --------------------------------

@pytest.mark.parametrize("op", sorted(OPS))
def test_every_op_is_drawn(op):
    find(programs(SHAPES), lambda p: any(s["op"] == op for s in p.body), settings=FIND)


@pytest.mark.parametrize("fn", sorted(FUNCTIONS))
def test_every_function_is_drawn(fn):
    find(programs(SHAPES), lambda p: any(s.get("fn") == fn for s in p.body), settings=FIND)


def test_in_place_writes_through_views():
    p = find(programs(SHAPES), lambda p: any(
        OPS[s["op"]].kind == "inplace" and s["x"] in _views(p) for s in p.body), settings=FIND)
    assert len(p.body) == 3  # shrinks to the minimum size: a view, a write into it, one more


def test_a_view_of_an_input_is_written_and_returned():
    find(programs(SHAPES), lambda p: any(
        OPS[s["op"]].kind == "inplace" and s["x"] in _views(p) and p.body[s["x"] - p.inputs]["x"] < p.inputs
        for s in p.body), settings=FIND)


@SETTINGS
@given(st.data())
def test_sizes_and_kinds_are_respected(data):
    lo = data.draw(st.integers(1, 5))
    hi = data.draw(st.integers(lo, 8))
    kinds = data.draw(st.sets(st.sampled_from(KINDS), min_size=1))
    p = data.draw(programs([(2, 3)], min_size=lo, max_size=hi, kinds=kinds))
    assert lo <= len(p.body) <= hi
    # a kind that cannot apply falls back to a functional statement, never to another kind
    assert p.kinds() <= set(kinds) | {"functional"}


@SETTINGS
@given(programs([(3, 4), (3, 4), (4,)]))
def test_every_drawn_program_runs(p):
    assert 3 <= len(p.body) <= 8
    outs = p(*inputs([(3, 4), (3, 4), (4,)]))
    assert len(outs) == len(p.outputs)


@SETTINGS
@given(programs([(2, 1), (2, 1)]))
def test_writes_never_read_their_own_memory(p):
    # torch leaves a write whose source overlaps it in part undefined (eager and compiled
    # programs may then differ, with no bug in either), so the strategy never draws one,
    # an in-place statement's result (its input itself) included
    values = inputs([(2, 1), (2, 1)])
    for s in p.body:
        if OPS[s["op"]].kind == "inplace" and s.get("other") is not None:
            storage = values[s["x"]].untyped_storage().data_ptr()
            assert values[s["other"]].untyped_storage().data_ptr() != storage, s
        values.append(OPS[s["op"]].run(values, s))


def test_shrinks_to_a_minimal_program():
    # "some output is a view of a view": the minimal program is two views and one more statement
    p = find(programs(SHAPES), lambda p: any(
        OPS[s["op"]].kind == "view" and s["x"] in _views(p) for s in p.body), settings=FIND)
    assert len(p.body) == 3
    assert sum(OPS[s["op"]].kind == "view" for s in p.body) >= 2


@pytest.mark.parametrize("kwargs", [
    dict(shapes=[]), dict(shapes=[(2,)] * 4), dict(shapes=[(-1,)]), dict(shapes="ab"),
    dict(shapes=[(2,)], min_size=4, max_size=3), dict(shapes=[(2,)], min_size=-1),
    dict(shapes=[(2,)], kinds=()), dict(shapes=[(2,)], kinds=("loop",)),
    dict(shapes=[(2,)], functions=("nope",)), dict(shapes=[(2,)], functions=()),
])
def test_invalid_arguments(kwargs):
    with pytest.raises(InvalidArgument):
        programs(**kwargs).example()


# -- JSON and source round trips -------------------------------------------------------

@SETTINGS
@given(programs(SHAPES))
def test_json_round_trip(p):
    again = Program.from_json(json.loads(json.dumps(p.to_json())))
    assert again == p
    a, b = p(*inputs(SHAPES, 1)), again(*inputs(SHAPES, 1))
    assert all(torch.equal(x, y) for x, y in zip(a, b))


@SETTINGS
@given(programs(SHAPES))
def test_source_runs_and_agrees(p):
    namespace = {"torch": torch, "F": torch.nn.functional}
    exec(p.source("prog", ["a", "b"]), namespace)
    xs, ys = inputs(SHAPES, 2), inputs(SHAPES, 2)
    want, got = p(*xs), namespace["prog"](*ys)
    assert len(want) == len(got)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
        assert g.stride() == w.stride() and g.storage_offset() == w.storage_offset()
    for x, y in zip(xs, ys):  # the same writes into the inputs
        torch.testing.assert_close(y, x, rtol=0, atol=0, equal_nan=True)


def test_source_reads_like_torch():
    p = Program(2, ({"op": "transpose", "x": 0, "dim0": 0, "dim1": 1},
                    {"op": "slice", "x": 2, "dim": 1, "start": 1, "stop": None, "step": 2},
                    {"op": "mul_", "x": 3, "other": None, "scalar": 2.0},
                    {"op": "call", "fn": "add", "x": 1, "other": 0}))
    assert p.source(arg_names=["a", "b"]) == (
        "def program(a, b):\n"
        "    v0 = a.transpose(0, 1)\n"
        "    v1 = v0[:, 1::2]\n"
        "    v1.mul_(2.0)\n"
        "    v3 = torch.add(b, a)\n"
        "    return (v0, v1, v3)\n")
    a, b = inputs([(2, 3), (2, 3)])
    a0 = a.clone()
    v0, v1, v3 = run_program(a, b, program=p.to_json())
    assert torch.equal(a[1::2, :], 2 * a0[1::2, :]) and torch.equal(a[0::2], a0[0::2])
    assert v1._base is a and torch.equal(v3, b + a)


@pytest.mark.parametrize("data", [
    {"inputs": 1, "body": [{"op": "nope", "x": 0}]},
    {"inputs": 1, "body": [{"op": "transpose", "x": 1, "dim0": 0, "dim1": 0}]},
    {"inputs": 0, "body": []},
    {"inputs": 1, "body": [{"op": "call", "fn": "nope", "x": 0, "other": None}]},
    {"body": []},
])
def test_malformed_programs_are_rejected(data):
    with pytest.raises(ProgramError):
        Program.from_json(data)
