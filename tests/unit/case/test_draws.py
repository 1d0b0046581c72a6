"""fuzzdiff.case.draws: a pinned counter-based stream, and cases that are pure functions of their JSON."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.unit.fdhelpers import PAIR, TRIPLE, UNARY, bitwise_equal
from hypothesis import given
from hypothesis import strategies as st

from fuzzdiff.case import draws
from fuzzdiff.case.case import Arg, Case
from fuzzdiff.cli import main
from fuzzdiff.record.files import read_record, rewrite_record, write_record
from fuzzdiff.case.layout import Alias, Layout
from fuzzdiff.record.format import FORMAT, CorpusError, case_from_json
from fuzzdiff.case.values import Probe, Values
from fuzzdiff.verdict import Verdict
from strategies import cases

MASK = 2**64 - 1
SEEDS = st.integers(0, 2**64 - 1)
# block lengths on both sides of SMALL_BLOCK: short blocks are computed in Python integers
LENGTHS = st.integers(0, 3 * draws.SMALL_BLOCK)


def splitmix64(seed: int, stream: int, i: int) -> int:
    """Word ``i`` of a stream, from the formula in fuzzdiff.case.draws' docstring, in plain ints."""
    z = (seed + stream * 2**56 + (i + 1) * 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


# -- the stream is pinned: a change of these numbers is a change of SCHEME ----------------

def test_stream_is_splitmix64():
    # the first output of the reference splitmix64 seeded with 0
    assert int(draws.words(0, 1)[0]) == 0xE220A8397B1DCDAF
    assert draws.SCHEME == "splitmix64-v1"


@given(SEEDS, st.integers(0, 7), st.integers(0, 1000), LENGTHS)
def test_words_follow_the_documented_formula(seed, stream, start, n):
    got = draws.words(seed, n, stream, start)
    assert got.dtype == np.uint64
    assert [int(w) for w in got] == [splitmix64(seed, stream, start + i) for i in range(n)]


@given(SEEDS, st.floats(-1e3, 1e3), st.floats(0, 1e3), LENGTHS)
def test_uniform_is_the_dyadic_rational(seed, low, width, n):
    high = low + width
    ws = [splitmix64(seed, 0, i) for i in range(n)]
    unit = draws.uniform(draws.words(seed, n))
    assert unit.dtype == np.float64
    assert [Fraction(float(u)) for u in unit] == [Fraction(w >> 11, 2**53) for w in ws]
    assert all(0 <= u < 1 for u in unit)
    scaled = draws.uniform(draws.words(seed, n), low, high)
    assert [float(x) for x in scaled] == [(w >> 11) * 2.0**-53 * (high - low) + low for w in ws]


@given(SEEDS, st.integers(-100, 100), st.integers(0, 2**32 - 1), LENGTHS)
def test_integers_bits_and_permutation(seed, low, span, n):
    ws = [splitmix64(seed, 0, i) for i in range(n)]
    z = draws.words(seed, n)
    assert draws.integers(z, low, low + span).dtype == np.int64
    assert draws.integers(z, low, low + span).tolist() == [low + ((w >> 32) * (span + 1) >> 32) for w in ws]
    assert draws.bits(z).tolist() == [bool(w >> 63) for w in ws]
    assert draws.permutation(z).tolist() == sorted(range(n), key=lambda i: (ws[i], i))


@given(SEEDS, st.floats(-10, 10), st.floats(0.1, 10), LENGTHS)
def test_normal_is_centred_irwin_hall(seed, mean, std, n):
    ws = [splitmix64(seed, 0, i) for i in range(2 * n)]
    want = []
    for a, b in zip(ws[::2], ws[1::2]):
        s = float((a & 0xFFFFFFFF) + (a >> 32) + (b & 0xFFFFFFFF) + (b >> 32)) - 2.0 * (2**32 - 1)
        want.append(s * (std * math.sqrt(3) * 2.0**-32) + mean)
    got = draws.normal(draws.words(seed, 2 * n), mean, std)
    assert got.dtype == np.float64 and got.tolist() == want


def test_normal_has_unit_variance_and_bounded_tails():
    x = draws.normal(draws.words(3, 400_000))
    assert abs(x.mean()) < 0.01 and abs(x.std() - 1) < 0.01
    assert np.abs(x).max() <= 2 * math.sqrt(3)


def test_streams_and_seeds_are_independent():
    a, b, c = draws.words(5, 64), draws.words(6, 64), draws.words(5, 64, draws.PROBES)
    assert not set(a.tolist()) & set(b.tolist()) and not set(a.tolist()) & set(c.tolist())


# -- a case is a pure function of its JSON --------------------------------------------------

FORBIDDEN = ("Generator", "rand", "randn", "randint", "normal", "randperm", "rand_like", "randn_like",
             "bernoulli", "multinomial", "manual_seed")


def _refuse(*args, **kwargs):
    raise AssertionError("drew from torch's random generator")


def everything_drawn(case: Case) -> list[torch.Tensor]:
    """Every random tensor a check of ``case`` may draw: storages (junk
    included), probes of each layout, batch examples, nudges, stacked junk."""
    out = list(case.storages().values())
    out += [t.detach() for t in case.materialize().args]
    for k in (1, 3):
        out += list(case.reseeded(k).storages().values())
    out += list(case.nudged(1e-3, seed=1).storages().values())
    like = out[0] if out else torch.zeros(())
    for layout in ("contiguous", "expanded", "transposed"):
        for zeros in (0.0, 0.5):
            for shape in ((), (3,), (2, 3), (2, 1, 3)):
                for dtype in (torch.float64, torch.float32, torch.complex128):
                    out.append(Probe(11, layout, zeros).like(torch.zeros(shape, dtype=dtype)))
    for a in case.args:
        out.append(a.values.junk(7, like.dtype if like.is_floating_point() else torch.float64))
    return out


def drawn_without_torch_rng(case: Case) -> list[torch.Tensor]:
    with pytest.MonkeyPatch.context() as mp:
        for name in FORBIDDEN:
            mp.setattr(torch, name, _refuse)
        for name in ("uniform_", "normal_", "random_", "bernoulli_", "exponential_", "cauchy_"):
            mp.setattr(torch.Tensor, name, _refuse)
        return everything_drawn(case)


def assert_same(xs, ys):
    assert len(xs) == len(ys)
    for x, y in zip(xs, ys):
        assert bitwise_equal(x, y) and x.stride() == y.stride()


@given(st.sampled_from([UNARY, PAIR, TRIPLE]).flatmap(cases))
def test_a_case_does_not_depend_on_torch_random_state(case):
    state = torch.get_rng_state()
    try:
        torch.manual_seed(0)
        before = everything_drawn(case)
        torch.manual_seed(12345)
        after = drawn_without_torch_rng(case)
        assert torch.equal(torch.get_rng_state(), torch.random.default_generator.get_state())
    finally:
        torch.set_rng_state(state)
    assert_same(before, after)


def special_case(dtype: str = "float64") -> Case:
    """Every kind of value: specials, a distinct ladder, a grid, kinks, a
    constant dim, junk around a stride-0 view, an alias, ints and bools."""
    return Case("unit", (
        Arg((3, 4), Values(seed=1, specials=((1, "-0"), (5, "inf"), (7, "subnormal"))),
            Layout(20, (1, 3), 5)),
        Arg((3, 4), Values(seed=2), Layout(20, (4, 1), 0), Alias(0, "view")),
        Arg((5,), Values(seed=3, distinct=True)),
        Arg((2, 3), Values(seed=4, grid=0.25, avoid=(0.0,), margin=0.1)),
        Arg((4, 3), Values(seed=5, constant=(0,)), Layout(7, (0, 2), 1)),
        Arg((6,), Values(seed=6, kind="int", low=0, high=5), dtype="int64", grad="none"),
        Arg((6,), Values(seed=7, kind="bool"), dtype="bool", grad="none"),
    ), dtype, params={"cotangent": {"seed": 9, "layout": "expanded", "zeros": 0.5}})


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16", "complex128"])
def test_every_kind_of_value_is_drawn_without_torch_rng(dtype):
    case = special_case(dtype)
    assert_same(everything_drawn(case), drawn_without_torch_rng(case))
    back = case_from_json(json.loads(json.dumps(case.to_json())))
    assert_same(everything_drawn(case), everything_drawn(back))


def test_module_parameters_are_the_parameter_stream():
    # written out in plain Python for torch-only scripts: the same numbers
    from fuzzdiff.targets.catalog.modules import grid_parameters
    for seed, start, n in ((0, 0, 5), (42, 17, 40), (2**16 - 1, 3, 9)):
        want = draws.integers(draws.words(seed, n, draws.PARAMETERS, start), -64, 64) / 64
        assert grid_parameters(seed, start, n) == want.tolist()


def test_module_parameters_are_drawn_without_torch_rng():
    from torch import nn

    from fuzzdiff.targets.catalog.modules import seeded

    like = torch.zeros(2, dtype=torch.float32)

    def params():
        module = seeded(nn.Linear(3, 2, device="meta"), like, seed=42)
        return [p.detach().clone() for p in module.parameters()]
    first = params()
    with pytest.MonkeyPatch.context() as mp:
        for name in FORBIDDEN:
            mp.setattr(torch, name, _refuse)
        assert_same(first, params())
    assert all(bool(((p * 64).round() == p * 64).all() and (p.abs() <= 1).all()) for p in first)


# -- nudging pinned values ----------------------------------------------------------------

FAIL = Verdict("fail", "planted", {"abs_error": 1.0})


def pinned(tmp_path, case: Case) -> Case:
    path, _ = write_record(tmp_path, "grad", case, FAIL)
    data = json.loads(path.read_text())
    for arg in data["inputs"]:  # a seed whose draw is nowhere near the stored values
        arg["values"]["seed"] += 1000
    path.write_text(json.dumps(data))
    return read_record(path).case


@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
def test_nudging_pinned_values_moves_them_a_little_and_keeps_them_pinned(tmp_path, dtype):
    case = pinned(tmp_path, special_case(dtype))
    amount = 1e-3
    moved = case.nudged(amount, seed=1)
    assert set(moved.data) == set(case.data)
    assert_same(list(moved.storages().values()), list(case.nudged(amount, seed=1).storages().values()))
    for i, before in case.data.items():
        a, after = case.args[i], moved.data[i]
        if a.grad == "none" or a.values.kind != "float":
            assert bitwise_equal(before, after)
            continue
        x, y = (torch.view_as_real(t).double() if t.is_complex() else t.double() for t in (before, after))
        finite = x.isfinite()
        step = (y - x)[finite].abs()
        bound = amount * max(a.values.high - a.values.low, 1.0)
        slack = 1e-6 * x[finite].abs() if dtype != "float64" else 0
        assert bool((step <= bound + slack + 1e-12).all()), (i, step.max(), bound)
        assert bool((step > 0).any()), f"args[{i}] did not move"
        lay = a.strided
        view_before, view_after = (t.as_strided(a.shape, lay.strides, lay.offset) for t in (before, after))
        for pos, _ in a.values.specials:  # specials stay where and what they are
            assert bitwise_equal(view_before.reshape(-1)[pos], view_after.reshape(-1)[pos])
        for d in a.values.constant:  # constant dims stay constant
            assert torch.equal(view_after, view_after.narrow(d, 0, 1).expand_as(view_after))


def test_nudged_pinned_case_keeps_avoided_kinks_avoided(tmp_path):
    case = pinned(tmp_path, Case("unit", (Arg((200,), Values(seed=2, low=-0.5, high=0.5, avoid=(0.0,),
                                                             margin=0.05)),)))
    moved = case.nudged(0.2, seed=3).data[0]
    assert bool((moved.abs() >= 0.05).all())


# -- record formats -------------------------------------------------------------------------

def format1(path) -> None:
    """The record as the previous format wrote it."""
    data = json.loads(path.read_text())
    data["format"] = 1
    del data["draws"]
    path.write_text(json.dumps(data))


def strided(seed: int = 7) -> Case:
    return Case("mul", (Arg((3, 4), Values(seed=seed), Layout(17, (1, 3), 5)),
                        Arg((3, 4), Values(seed=seed + 1))),
                params={"cotangent": {"seed": 3, "layout": "transposed", "zeros": 0.0},
                        "direction": {"seed": 4, "layout": "contiguous", "zeros": 0.0}})


def test_records_name_their_format_and_draws(tmp_path):
    path, _ = write_record(tmp_path, "grad", strided(), FAIL)
    data = json.loads(path.read_text())
    assert data["format"] == FORMAT == 2 and data["draws"] == draws.SCHEME
    record = read_record(path)
    assert record.draws == draws.SCHEME and record.redrawn is None


def test_a_format1_record_loads_and_says_its_probes_are_redrawn(tmp_path, capsys):
    case = strided()
    path, _ = write_record(tmp_path, "grad", case, FAIL)
    format1(path)
    record = read_record(path)
    assert draws.SCHEME in record.redrawn and "format-1" in record.redrawn
    assert_same(list(record.case.storages().values()), list(case.storages().values()))
    main(["repro", str(path)])
    out = capsys.readouterr().out
    assert "note:" in out and "redrawn" in out and draws.SCHEME in out

    rewrite_record(record, FAIL)  # the move to this format: values, id and status kept
    again = read_record(path)
    assert again.draws == draws.SCHEME and json.loads(path.read_text())["format"] == FORMAT
    assert again.id == record.id and again.status == record.status and again.verdict == FAIL
    assert_same(list(again.case.storages().values()), list(case.storages().values()))
    with pytest.raises(ValueError):
        rewrite_record(again, Verdict("pass", ""))  # another kind is another record


@pytest.mark.parametrize("change, field", [
    ({"format": 99}, "'format'"),
    ({"draws": "philox-v9"}, "'draws'"),
    ({"draws": None}, "'draws'"),  # format 2 without its scheme
])
def test_unknown_formats_and_schemes_are_clear_errors(tmp_path, capsys, change, field):
    path, _ = write_record(tmp_path, "grad", strided(), FAIL)
    data = json.loads(path.read_text())
    data.update(change)
    if data["draws"] is None:
        del data["draws"]
    path.write_text(json.dumps(data))
    with pytest.raises(CorpusError) as info:
        read_record(path)
    assert str(path) in str(info.value) and field in str(info.value)
    assert main(["repro", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and field in err and "Traceback" not in err


def test_rerecord_moves_reproducing_records_and_lists_the_others(tmp_path, capsys):
    from fuzzdiff.commands.rerecord import main as rerecord

    repo = Path(__file__).resolve().parents[3]
    source = next((repo / "corpus" / "vmap" / "mse_loss").glob("1673357661b54a8b.json"))
    good, bad = tmp_path / "good" / source.name, tmp_path / "bad" / source.name
    for path, exception in ((good, None), (bad, "ValueError")):
        data = json.loads(source.read_text())
        data["format"] = 1
        data.pop("draws", None)
        if exception:  # a recorded failure the replay no longer gives
            data["verdict"]["errors"]["exception"] = exception
        path.parent.mkdir()
        path.write_text(json.dumps(data))
    before = bad.read_text()
    assert rerecord([str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"rewritten     {good}" in out and f"differs       {bad}" in out
    assert bad.read_text() == before
    moved, recorded = read_record(good), json.loads(source.read_text())
    assert moved.draws == draws.SCHEME and moved.verdict.kind == recorded["verdict"]["kind"]
    assert json.loads(good.read_text())["inputs"] == recorded["inputs"]
    assert rerecord([str(good)]) == 0 and "rewritten" not in capsys.readouterr().out  # done already
