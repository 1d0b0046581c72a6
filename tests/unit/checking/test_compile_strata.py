"""The compile check within a time budget: its first cases meet every
(backends, transforms) stratum; FuzzConfig.compile_transforms narrows its draws."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings

from fuzzdiff.checking.budget import START_FLOOR
from fuzzdiff.checking.session import COMPILE_STRATA, STRATUM_EXAMPLES, Session
from fuzzdiff.checks import get_check
from fuzzdiff.config import COMPILE_BACKENDS, COMPILE_TRANSFORMS, ConfigError, FuzzConfig
from fuzzdiff.search.runner import case_strategy
from fuzzdiff.targets import get_target


def _phases(name: str, until: float | None, config: FuzzConfig):
    session = SimpleNamespace(config=config, hypothesis=settings(max_examples=100))
    return Session.phases(session, name, until)  # type: ignore[arg-type]


def test_a_budgeted_compile_check_gives_each_stratum_its_first_cases_then_its_whole_mix():
    config = FuzzConfig(compile_backends=("aot_eager", "aot_function"))
    phases = _phases("compile", until=1e9, config=config)
    *strata, (whole, last) = phases
    assert whole == config and last.max_examples == 100
    assert all(s.max_examples == STRATUM_EXAMPLES for _, s in strata)
    first = strata[0][0]
    assert (first.compile_backends, first.compile_transforms) == COMPILE_STRATA[0]
    # every stratum keeps to the caller's backends: none with inductor alone is left
    assert all(set(c.compile_backends) <= {"aot_eager", "aot_function"} for c, _ in strata)
    expected = sum(1 for backends, _ in COMPILE_STRATA if {"aot_eager", "aot_function"} & set(backends))
    assert len(strata) == expected
    # reverse mode under a traced backend comes before the partitioners and the forward transforms
    order = [(c.compile_backends, c.compile_transforms) for c, _ in strata]
    assert order.index((("aot_eager",), ("grad", "vjp"))) < order.index((("aot_function",), ("none", "grad", "vjp")))


def test_the_strata_meet_every_backend_and_transform_once_and_the_cheap_compiles_first():
    met = [(b, t) for backends, transforms in COMPILE_STRATA for b in backends for t in transforms]
    assert len(met) == len(set(met))
    # (a pair the running torch restricts, such as inductor at dual inputs, is left out by the draws)
    assert set(met) == {(b, t) for b in COMPILE_BACKENDS for t in COMPILE_TRANSFORMS}
    # the aot_function partitioners (no Dynamo) meet every transform before inductor's codegen meets any
    position = {
        pair: k
        for k, (backends, transforms) in enumerate(COMPILE_STRATA)
        for pair in ((b, t) for b in backends for t in transforms)
    }
    assert max(position["aot_function", t] for t in COMPILE_TRANSFORMS) < position["inductor", "none"]


@pytest.mark.parametrize("name, until", [("compile", None), ("grad", 1e9)])
def test_without_a_budget_or_for_another_check_the_check_runs_its_whole_mix_once(name, until):
    config = FuzzConfig()
    (only, hypothesis), *more = _phases(name, until, config)
    assert not more and only == config and hypothesis.max_examples == 100


def test_compile_transforms_is_a_validated_setting_read_from_the_environment():
    assert FuzzConfig().compile_transforms == COMPILE_TRANSFORMS
    config = FuzzConfig.resolve({"FUZZDIFF_COMPILE_TRANSFORMS": "grad, vjp"})
    assert config.compile_transforms == ("grad", "vjp")
    with pytest.raises(ConfigError, match="compile_transforms"):
        FuzzConfig(compile_transforms=("grad", "hessian"))
    with pytest.raises(ConfigError, match="compile_transforms"):
        FuzzConfig(compile_transforms=())


@pytest.mark.parametrize(
    "backends, transforms, expected",
    [
        (("aot_eager",), ("grad", "vjp"), {"grad", "vjp"}),
        # inductor cannot take dual inputs (a torch bug, checks.compile.RESTRICTED): f alone instead
        (("inductor",), ("dual",), {"none"}),
    ],
)
def test_the_compile_check_draws_only_the_transforms_it_is_configured_with(backends, transforms, expected):
    check = get_check("compile").configured(FuzzConfig(compile_backends=backends, compile_transforms=transforms))
    target = get_target("sin")
    seen: set[str] = set()

    @settings(max_examples=30, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(case_strategy(check, target))
    def draw(case):
        assert case.params["backend"] in backends
        seen.add(case.params.get("transform", "none"))

    draw()
    assert seen == expected


class _Clock:
    def __init__(self):
        self.now = 100.0

    def monotonic(self):
        return self.now


class _Timed(SimpleNamespace):
    """A session whose phases are ``phases`` and whose every search costs
    ``cost`` seconds of ``clock`` and one case: what Session.run does with the time."""

    def phases(self, name, until):
        return [(FuzzConfig(), settings(max_examples=1))] * self.count

    def search(self, name, until, tally, seen, config, hypothesis):
        self.searched += 1
        self.clock.now += self.cost
        tally.cases += 1
        return False


@pytest.fixture
def clock(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr("fuzzdiff.checking.session.time", clock)
    return clock


def test_compile_is_not_started_with_less_of_its_share_left_than_its_floor(clock):
    session = _Timed(count=3, cost=0.0, searched=0, clock=clock)
    tally = Session.run(session, "compile", until=clock.now + START_FLOOR["compile"] / 2)  # type: ignore[arg-type]
    assert session.searched == 0 and tally.cut and not tally.cases
    tally = Session.run(session, "grad", until=clock.now + START_FLOOR["compile"] / 2)  # type: ignore[arg-type]
    assert session.searched == 3 and not tally.cut


def test_a_phase_is_not_started_when_the_last_ones_cost_would_pass_the_share(clock):
    """A stratum's first case compiles again: one as dear as the last is not begun past the share."""
    session = _Timed(count=8, cost=2.0, searched=0, clock=clock)
    tally = Session.run(session, "grad", until=clock.now + 5.0)  # type: ignore[arg-type]
    assert session.searched == 2 and tally.cut and tally.cases == 2  # 2 + 2, then 4 + 2 > 5: not begun
    session = _Timed(count=8, cost=0.5, searched=0, clock=clock)
    assert not Session.run(session, "grad", until=clock.now + 10).cut  # type: ignore[arg-type]
    assert session.searched == 8
