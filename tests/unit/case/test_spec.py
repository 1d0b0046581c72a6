"""The shape-spec mini-language (docs/pages/design.md, contract 3) and spec_shapes()."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, strategies as st
from hypothesis.errors import InvalidArgument

from fuzzdiff.case.spec import ArgSpec, Dim, SpecError, parse_spec
from fuzzdiff.config import FuzzConfig
from strategies import spec_shapes

# -- parsing valid specs -------------------------------------------------------------


def test_parse_names_shared_fixed_and_variadic():
    x, w = parse_spec("x: *b n m, w: m k")
    assert (x.name, w.name) == ("x", "w")
    assert x.dims == (Dim("name", "b", variadic=True), Dim("name", "n"), Dim("name", "m"))
    assert w.dims == (Dim("name", "m"), Dim("name", "k"))


@pytest.mark.parametrize("token,dim", [
    ("n", Dim("name", "n")),
    ("batch_1", Dim("name", "batch_1")),
    ("3", Dim("fixed", size=3)),
    ("0", Dim("fixed", size=0)),
    ("_", Dim("anon")),
    ("...", Dim("anon", variadic=True)),
    ("*b", Dim("name", "b", variadic=True)),
    ("#n", Dim("name", "n", broadcast=True)),
    ("*#b", Dim("name", "b", variadic=True, broadcast=True)),
    ("*_", Dim("anon", variadic=True)),
])
def test_parse_each_dim_token(token, dim):
    (arg,) = parse_spec(f"x: {token}")
    assert arg.dims == (dim,)
    assert str(arg) == f"x: {token}" or token == "*_"


def test_empty_dims_is_a_0d_tensor_and_whitespace_is_free():
    assert parse_spec("x:") == (ArgSpec("x", ()),)
    assert parse_spec("  x :   n    m ,y:m") == parse_spec("x: n m, y: m")


def test_str_round_trips():
    spec = "x: *#b n 3 _, y: ... #m, z:"
    assert parse_spec(", ".join(str(a) for a in parse_spec(spec))) == parse_spec(spec)


def test_parse_is_cached_but_immutable():
    a, b = parse_spec("x: n m"), parse_spec("x: n m")
    assert a == b
    assert isinstance(a, tuple) and isinstance(a[0].dims, tuple)
    with pytest.raises(Exception):
        a[0].name = "y"  # frozen: a cached result cannot be corrupted by a caller


def test_non_string_spec_is_a_type_error():
    with pytest.raises(TypeError, match="must be a str"):
        parse_spec(["x: n"])


# -- malformed specs point at the offending token -----------------------------------

@pytest.mark.parametrize("spec,pos,reason", [
    ("x: n, x: m", 6, "appears twice"),
    ("x: n m$", 5, "bad dimension"),
    ("x: n, y: *a k *b", 14, "more than one variadic"),
    ("x: n, y: ... *b", 13, "more than one variadic"),
    ("1x: n", 0, "bad argument name"),
    ("x: n, y m", 6, "needs 'name: dims'"),
    ("x: n,, y: m", 5, "empty argument entry"),
    ("x: n, y: **b", 9, "bad dimension"),
    ("x: n, y: -1", 9, "bad dimension"),
    ("x: n, y: n.m", 9, "bad dimension"),
    ("x: n, y: n, x: m", 12, "appears twice"),
])
def test_malformed_spec_points_at_token(spec, pos, reason):
    with pytest.raises(SpecError) as info:
        parse_spec(spec)
    err = info.value
    assert reason in err.reason
    assert err.spec == spec
    assert err.pos == pos
    # the message quotes the spec and draws a caret under the offending token
    _, quoted, caret = str(err).splitlines()
    assert quoted == "  " + spec
    assert caret == "  " + " " * pos + "^"


def test_trailing_comma_is_an_empty_entry():
    with pytest.raises(SpecError, match="empty") as info:
        parse_spec("x: n,")
    assert info.value.pos == len("x: n,")


def test_spec_shapes_rejects_malformed_spec_as_invalid_argument():
    with pytest.raises(InvalidArgument, match="spec"):
        spec_shapes("x: n$")


# -- spec_shapes -------------------------------------------------------------------

@given(spec_shapes("x: *b n m, w: m k, v: 3 _ k"))
def test_shared_names_fixed_ints_and_anonymous(shapes):
    x, w, v = shapes["x"], shapes["w"], shapes["v"]
    assert x[-1] == w[0]          # m
    assert w[1] == v[2]           # k
    assert v[0] == 3              # fixed
    assert len(w) == 2 and len(v) == 3
    assert 2 <= len(x) <= 4       # *b has 0..2 dims
    assert all(0 <= s <= 4 for s in x + w + v[1:])


@given(spec_shapes("x: *b n, y: *b n, z: ..."))
def test_variadic_groups_are_shared_and_anonymous_ones_are_not(shapes):
    assert shapes["x"] == shapes["y"]
    assert len(shapes["z"]) <= 2


def test_anonymous_groups_are_drawn_per_argument():
    from tests.unit.fdhelpers import reach
    found = reach(spec_shapes("x: ..., y: ..."), lambda s: s["x"] != s["y"])
    assert found["x"] != found["y"]


@given(spec_shapes("x: #n m, y: n m, z: *#b n m, w: *b 1 1"))
def test_broadcast_dims_really_broadcast(shapes):
    x, y, z, w = shapes["x"], shapes["y"], shapes["z"], shapes["w"]
    assert x[0] in (1, y[0]) and x[1] == y[1]
    out = torch.broadcast_shapes(x, y, z, w)
    # the non-# arguments fix the result: broadcasting never grows a shared size
    assert tuple(out[-2:]) == y
    assert tuple(out[:-2]) == w[:-2]


def test_broadcast_dims_reach_both_one_and_the_shared_size():
    from tests.unit.fdhelpers import reach
    s = spec_shapes("x: #n, y: n", min_side=2)
    one = reach(s, lambda d: d["x"] == (1,))
    full = reach(s, lambda d: d["x"] == d["y"])
    assert one["x"] == (1,) and one["y"][0] >= 2
    assert full["x"] == full["y"]


def test_broadcast_variadic_group_reaches_a_one():
    from tests.unit.fdhelpers import reach
    s = spec_shapes("x: *#b, y: *b", min_side=2)
    found = reach(s, lambda d: 1 in d["x"])
    assert len(found["x"]) == len(found["y"])
    assert torch.broadcast_shapes(found["x"], found["y"]) == torch.Size(found["y"])


@given(st.data())
def test_fixed_pins_named_sizes(data):
    n = data.draw(st.integers(0, 6))
    shapes = data.draw(spec_shapes("x: n m, y: m n", fixed={"n": n}))
    assert shapes["x"][0] == n and shapes["y"][1] == n
    assert shapes["x"][1] == shapes["y"][0]


@given(spec_shapes("x: a b c", min_side=2, max_side=3))
def test_side_bounds_are_respected(shapes):
    assert all(2 <= s <= 3 for s in shapes["x"])


@given(spec_shapes("x: *b", max_variadic=0))
def test_max_variadic_zero_gives_no_dims(shapes):
    assert shapes["x"] == ()


def test_bounds_limit_a_named_size_wherever_the_name_appears():
    x, y = parse_spec("x: n>=1 m, y: n<=3 *b>=2")
    assert (x.dims[0].low, x.dims[0].high) == (1, 3) == (y.dims[0].low, y.dims[0].high)
    assert x.dims[1].low is None and y.dims[1].variadic and y.dims[1].low == 2
    assert str(x) == "x: n>=1<=3 m"


@pytest.mark.parametrize("spec, message", [
    ("x: n>=", "bad bounds"),
    ("x: n>=3<=1", "lower bound 3 is above the upper bound 1"),
    ("x: n>=2, y: n<=1", "leave no size"),
    ("x: 3>=1", "bad dimension"),
])
def test_malformed_bounds_name_the_token(spec, message):
    with pytest.raises(SpecError, match=message):
        parse_spec(spec)


def test_bounded_sizes_are_drawn_within_their_bounds_and_shrink_to_the_lower_one():
    from hypothesis import find, given, settings

    from strategies.shapes import spec_shapes
    strategy = spec_shapes("x: n>=1 m, y: n<=3 *b>=2", max_side=5)

    @settings(max_examples=200, database=None)
    @given(strategy)
    def bounded(shapes):
        assert 1 <= shapes["x"][0] <= 3 and shapes["y"][0] == shapes["x"][0]
        assert all(b >= 2 for b in shapes["y"][1:])

    bounded()
    assert find(strategy, lambda s: len(s["y"]) > 1, settings=settings(database=None))["y"] == (1, 2)


def test_a_target_undefined_below_a_size_draws_valid_cases_many_structures_at_a_time():
    """nn.InstanceNorm needs three spatial values: once a filter that rejected most
    lists of several structures (Unsatisfiable under fuzzdiff run --max-examples 1)."""
    from hypothesis import settings

    from fuzzdiff.search.fuzzing import fuzz
    for name in ("nn_instance_norm1d", "nn_instance_norm2d"):
        tally = fuzz("per_sample", name, FuzzConfig(seed=1, variants=1, structures=8),
                     settings=settings(max_examples=2, database=None, deadline=None))
        assert tally.counts["pass"] >= 8, (name, tally.counts)
