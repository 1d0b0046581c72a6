"""Values and Probes: intervals, kink avoidance, spread, and what cotangents look like."""

from __future__ import annotations

import math

import torch
from tests.unit.fdhelpers import reach
from hypothesis import assume, given
from hypothesis import strategies as st

from fuzzdiff.case import draws
from fuzzdiff.case.values import FINITE_SPECIALS, Probe, Values, probe_like, special_value
from strategies import layouts, probes, shapes, values

FLOATS = (torch.float64, torch.float32)


@st.composite
def intervals(draw, min_width=0.0):
    low = draw(st.floats(-100, 100, allow_nan=False, allow_infinity=False))
    width = draw(st.floats(min_width, 50, allow_nan=False, allow_infinity=False))
    return low, low + width


@st.composite
def sampled(draw, **value_kwargs):
    """(Values, shape, dtype, tensor) drawn through strategies.values."""
    low, high = draw(intervals())
    v = draw(values(low=low, high=high, **value_kwargs))
    shape = draw(shapes(max_rank=3, max_side=6))
    dtype = draw(st.sampled_from(FLOATS))
    return v, shape, dtype, v.sample(shape, dtype)


def in_interval(t: torch.Tensor, low: float, high: float, dtype) -> bool:
    # bounds rounded to the dtype, as the values are
    lo = torch.tensor(low, dtype=torch.float64).to(dtype)
    hi = torch.tensor(high, dtype=torch.float64).to(dtype)
    return bool(((t >= lo) & (t <= hi)).all())


@given(sampled())
def test_values_lie_in_the_interval(drawn):
    v, shape, dtype, t = drawn
    assert t.shape == torch.Size(shape) and t.dtype == dtype
    assert in_interval(t, v.low, v.high, dtype), (v, t)


@given(sampled(specials=True))
def test_values_lie_in_the_interval_except_at_special_positions(drawn):
    v, shape, dtype, t = drawn
    flat = t.reshape(-1)
    assume(flat.numel() > 0)
    special_at = {pos % flat.numel() for pos, _ in v.specials}
    keep = torch.tensor([i not in special_at for i in range(flat.numel())], dtype=torch.bool)
    assert in_interval(flat[keep], v.low, v.high, dtype)
    for pos, name in v.specials:
        # the last special written at a position wins
        last = [n for p, n in v.specials if p % flat.numel() == pos % flat.numel()][-1]
        want = special_value(last, dtype)
        got = float(flat[pos % flat.numel()])
        assert got == want or (math.isnan(got) and math.isnan(want))
        assert math.copysign(1, got) == math.copysign(1, want) or math.isnan(want)


@given(st.data())
def test_specials_hold_exactly_their_special_value(data):
    name = data.draw(st.sampled_from(FINITE_SPECIALS + ("inf", "-inf", "nan")))
    dtype = data.draw(st.sampled_from(FLOATS))
    t = Values(seed=data.draw(st.integers(0, 99)), specials=((2, name),)).sample((5,), dtype)
    want = special_value(name, dtype)
    got = float(t[2])
    assert got == want or (math.isnan(got) and math.isnan(want))
    if name == "-0":
        assert math.copysign(1.0, got) == -1.0
    if name.lstrip("-") == "subnormal":
        assert 0 < abs(got) < torch.finfo(dtype).tiny
    if name.lstrip("-") == "huge":
        assert math.isfinite(got * got if dtype == torch.float64 else
                             float(torch.tensor(got, dtype=dtype) ** 2))


@given(sampled(avoid=(0.0, 1.0), margin=0.05))
def test_avoid_keeps_values_a_margin_away_from_kinks(drawn):
    v, shape, dtype, t = drawn
    assert v.avoid == (0.0, 1.0) and v.margin == 0.05
    # possible only where [low, high] has room on one side of each kink (else the
    # interval wins, see the next test)
    assume(all(k + v.margin <= v.high or k - v.margin >= v.low for k in v.avoid))
    t64 = t.to(torch.float64)
    slack = 1e-6 if dtype == torch.float32 else 1e-12  # rounding of k +- margin to the dtype
    for k in v.avoid:
        assert bool(((t64 - k).abs() >= v.margin - slack).all()), (k, t)


@given(sampled(avoid=(0.0,), margin=0.05))
def test_avoid_keeps_values_inside_the_interval(drawn):
    # pushing a value off a kink must not push it out of [low, high]
    v, shape, dtype, t = drawn
    assert in_interval(t, v.low, v.high, dtype), (v, t)


def test_avoid_actually_moves_values():
    # without avoid some values of this interval fall near 0; with it none do
    plain = Values(seed=3, low=-0.1, high=0.1).sample((1000,), torch.float64)
    pushed = Values(seed=3, low=-0.1, high=0.1, avoid=(0.0,), margin=0.05).sample((1000,), torch.float64)
    assert bool((plain.abs() < 0.05).any())
    assert bool((pushed.abs() >= 0.05).all())


@given(sampled(distinct=True))
def test_distinct_values_are_well_separated(drawn):
    v, shape, dtype, t = drawn
    n = t.numel()
    assume(n > 1)
    assert v.grid is None
    gaps = t.to(torch.float64).reshape(-1).sort().values.diff()
    rung = (v.high - v.low) / n
    slack = 1e-6 * max(abs(v.low), abs(v.high), 1.0) if dtype == torch.float32 else 1e-9
    assert float(gaps.min()) >= 0.6 * rung - slack, (gaps.min(), rung)
    assert in_interval(t, v.low, v.high, dtype)


def test_distinct_versus_plain_sampling():
    # plain sampling of many values has near-ties; distinct never does
    plain = Values(seed=0).sample((500,), torch.float64).sort().values.diff().min()
    spread = Values(seed=0, distinct=True).sample((500,), torch.float64).sort().values.diff().min()
    assert float(plain) < 0.6 * 4.0 / 500 <= float(spread)


@given(sampled())
def test_grid_values_are_multiples_of_the_grid(drawn):
    v, shape, dtype, t = drawn
    assume(v.grid is not None)
    has_point = math.ceil(v.low / v.grid) <= math.floor(v.high / v.grid)
    q = t.to(torch.float64) / v.grid
    if has_point:
        assert torch.equal(q, q.round())
    # and, snapped or not (no grid point inside), never outside the interval
    assert in_interval(t, v.low, v.high, dtype)


@given(st.data())
def test_int_and_bool_kinds(data):
    hi = data.draw(st.integers(0, 9))
    vi = data.draw(values(low=0, high=hi, kind="int"))
    t = vi.sample((50,), torch.int64)
    assert t.dtype == torch.int64 and bool(((t >= 0) & (t <= hi)).all())
    vb = data.draw(values(kind="bool"))
    b = vb.sample((50,), torch.bool)
    assert b.dtype == torch.bool


# -- cotangent / tangent probes --------------------------------------------------------

@st.composite
def probe_and_tensor(draw, min_rank=0):
    p = draw(probes())
    shape = draw(shapes(min_rank=min_rank, max_rank=4, min_side=0, max_side=5))
    dtype = draw(st.sampled_from(FLOATS + (torch.complex128,)))
    return p, torch.zeros(shape, dtype=dtype)


@given(probe_and_tensor())
def test_probes_have_the_shape_and_dtype_and_are_non_unit(pt):
    p, t = pt
    out = p.like(t)
    assert out.shape == t.shape and out.dtype == t.dtype and out.device == t.device
    assert torch.isfinite(out).all()
    if t.numel() >= 2:
        assert not bool((out == 1).all()), "an all-ones cotangent hides index mix-ups"
    if t.numel() >= 4 and p.zeros == 0:
        assert len(set(out.reshape(-1).tolist())) >= 2


@given(probe_and_tensor())
def test_probes_are_deterministic(pt):
    p, t = pt
    a, b = p.like(t), p.like(t)
    assert torch.equal(a, b) and a.stride() == b.stride()


def test_probes_reach_expanded_stride_zero():
    def expanded(pt):
        out = pt[0].like(pt[1])
        return any(s == 0 and n > 1 for n, s in zip(out.shape, out.stride()))

    p, t = reach(probe_and_tensor(min_rank=1), expanded)
    out = p.like(t)
    d = next(d for d, (n, s) in enumerate(zip(out.shape, out.stride())) if s == 0 and n > 1)
    assert p.layout == "expanded"
    assert torch.equal(out, out.narrow(d, 0, 1).expand_as(out))


def test_probes_reach_transposed():
    def transposed(pt):
        out = pt[0].like(pt[1])
        return out.dim() >= 2 and out.mT.is_contiguous() and not out.is_contiguous()

    p, t = reach(probe_and_tensor(min_rank=2), transposed)
    assert p.layout == "transposed"
    assert not p.like(t).is_contiguous()


def test_probes_reach_zeros_among_nonzeros():
    def some_zeros(pt):
        out = pt[0].like(pt[1])
        return bool((out == 0).any()) and bool((out != 0).any())

    p, t = reach(probe_and_tensor(min_rank=1), some_zeros)
    assert p.zeros > 0


def test_probe_values_are_not_unit_scale():
    # random, non-unit: mean away from 0 and spread away from 1 on a large sample
    out = Probe(seed=11).like(torch.zeros(20000, dtype=torch.float64))
    assert abs(float(out.mean()) - 0.25) < 0.05
    assert abs(float(out.std()) - 1.5) < 0.05


@given(probes(), shapes(max_rank=3, max_side=4), st.sampled_from([torch.float64, torch.float32]))
def test_probes_from_stored_params_are_the_probes_themselves(p, shape, dtype):
    """The derivative checks read a probe's stored params without building a
    Probe: the tensors must be the Probe's own, bit for bit, layout included."""
    from fuzzdiff.case.directions import probes_like
    tensors = [torch.zeros(shape, dtype=dtype), torch.zeros(shape[::-1], dtype=dtype)]
    fast = probes_like({"cotangent": p.__dict__.copy()}, "cotangent", tensors)
    slow = [Probe(p.seed + 7919 * k, p.layout, p.zeros).like(t) for k, t in enumerate(tensors)]
    for a, b in zip(fast, slow):
        assert a.dtype == b.dtype and a.stride() == b.stride()
        assert torch.equal(a, b)


DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64, torch.int64, torch.bool)


@given(st.data())
def test_a_storage_is_filled_as_its_view_is_written(data):
    # Values.filled builds a strided storage in one NumPy pass; by definition it is
    # the junk around the view, then the drawn values copied into the view.
    shape = data.draw(shapes(max_rank=3, max_side=4))
    layout = data.draw(layouts(shape))
    dtype = data.draw(st.sampled_from(DTYPES))
    kind = "bool" if dtype == torch.bool else "int" if dtype == torch.int64 else "float"
    narrow = tuple(d for d, s in enumerate(layout.strides) if s == 0)
    v = Values(seed=data.draw(st.integers(0, 2**64 - 1)), low=-3, high=3, kind=kind, constant=narrow)
    # junk: the values stream's words from 4 n on, uniform in the interval (integers, bits)
    z = draws.words(v.seed, layout.storage_size, draws.VALUES, 4 * math.prod(shape))
    junk = draws.integers(z, -3, 3) if kind == "int" else draws.bits(z) if kind == "bool" else draws.uniform(z, -3, 3)
    want = torch.tensor(junk.tolist(), dtype=torch.float64 if kind == "float" else None).to(dtype)
    logical = v.sample(shape, dtype)
    for d in narrow:
        logical = logical.narrow(d, 0, min(1, logical.shape[d]))
    want.as_strided(logical.shape, layout.strides, layout.offset).copy_(logical)
    got = v.filled(tuple(shape), dtype, layout, narrow)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


def test_values_and_probes_drawn_again_are_fresh_tensors_with_the_same_bits():
    # small draws are drawn once (a cache): a target that writes into its
    # input or cotangent must not change what the next variant is given
    values = Values(seed=5)
    first = values.sample((3, 4), torch.float64)
    kept = first.clone()
    first.add_(1.0)
    assert torch.equal(values.sample((3, 4), torch.float64), kept)
    cotangent = probe_like(11, "contiguous", 0.0, torch.empty(4, 2, dtype=torch.float64))
    kept = cotangent.clone()
    cotangent.mul_(0.0)
    assert torch.equal(probe_like(11, "contiguous", 0.0, torch.empty(4, 2, dtype=torch.float64)), kept)


def test_a_neighbour_unties_two_arguments_drawn_alike_at_every_element():
    """x1 == x2 puts a ranking loss on its kink; the neighbours must leave it
    everywhere. Steps clipped to +-1 gave a third of them exactly the same
    move, and 4 of 50 elements still tied (MarginRankingLoss, a false alarm)."""
    from fuzzdiff.case.case import Arg, Case

    alike = Values(seed=0, low=-8.9, high=9.0, grid=0.25)
    case = Case("t", (Arg((200,), alike), Arg((200,), alike)), "float64")
    x1, x2 = case.materialize(requires_grad=False).args
    assert torch.equal(x1, x2)
    for seed in (1, 2):
        a, b = case.nudged(1e-3, seed=seed).materialize(requires_grad=False).args
        assert bool(((a - b) != 0).all()), int(((a - b) == 0).sum())
