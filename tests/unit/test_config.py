"""FuzzConfig: one frozen object, layered defaults < environment < options,
and every bad setting named with where it came from."""

import os
from dataclasses import replace
from pathlib import Path

import pytest
from tests.unit.fdhelpers import WrongSquare
from hypothesis import settings

from fuzzdiff import pytest_plugin
from fuzzdiff.api import environ_config
from fuzzdiff.checks import get_check
from fuzzdiff.config import COMPILE_BACKENDS, ConfigError, FuzzConfig
from fuzzdiff.search.fuzzing import FuzzFailure, fuzz
from fuzzdiff.targets import get_target
from fuzzdiff.targets.target import Target


def test_layers_defaults_then_environment_then_options():
    assert FuzzConfig.resolve({}) == FuzzConfig()
    env = {"FUZZDIFF_VARIANTS": "3", "FUZZDIFF_CORPUS": "/tmp/c", "FUZZDIFF_COMPILE_BACKENDS": "aot_eager"}
    config = FuzzConfig.resolve(env)
    assert (config.variants, config.corpus, config.compile_backends) == (3, Path("/tmp/c"), ("aot_eager",))
    assert FuzzConfig.resolve(env, variants=5, corpus=None).variants == 5  # None leaves a layer as it is
    assert FuzzConfig.resolve(env, variants=5).corpus == Path("/tmp/c")
    base = FuzzConfig(variants=4, structures=1)
    assert FuzzConfig.resolve({}, base=base) == base
    assert FuzzConfig.resolve({"FUZZDIFF_STRUCTURES": "2"}, base=base).structures == 2


@pytest.mark.parametrize("env, named", [
    ({"FUZZDIFF_VARIANTS": "many"}, r"\$FUZZDIFF_VARIANTS must be an integer"),
    ({"FUZZDIFF_VARIANTS": "0"}, r"variants must be an integer >= 1.*\$FUZZDIFF_VARIANTS"),
    ({"FUZZDIFF_TIMEOUT": "-1"}, r"timeout must be .*\$FUZZDIFF_TIMEOUT"),
    ({"FUZZDIFF_COMPILE_BACKENDS": "inductor,nope"}, r"compile_backends must name some of"),
])
def test_a_bad_setting_names_itself_and_its_source(env, named):
    with pytest.raises(ConfigError, match=named):
        FuzzConfig.resolve(env)


def test_unknown_settings_are_refused():
    with pytest.raises(ConfigError, match="unknown setting"):
        FuzzConfig.resolve({}, variant=3)


def test_environ_rebuilds_the_config():
    config = FuzzConfig(corpus=Path("/tmp/x"), variants=3, timeout=1.5, compile_backends=("inductor", "aot_eager"),
                        hypothesis_storage=Path("/tmp/h"))
    assert FuzzConfig.resolve(config.environ()) == config


def test_hypothesis_storage_is_resolved_as_hypothesis_resolves_it():
    assert FuzzConfig().example_dir == Path(".hypothesis/examples")
    config = FuzzConfig.resolve({"HYPOTHESIS_STORAGE_DIRECTORY": "/tmp/h"})
    assert config.hypothesis_storage == Path("/tmp/h") and config.example_dir == Path("/tmp/h/examples")


def test_the_compile_check_draws_only_the_configured_backends():
    seen = set()
    config = FuzzConfig(variants=1, structures=1, compile_backends=("aot_function",))
    target = get_target("exp")

    check = get_check("compile").configured(config)
    real = check.run

    def spy(t, case):
        seen.add(case.params["backend"])
        return real(t, case)

    fuzz(replace(check, run=spy), target, config, settings=settings(max_examples=6, database=None, deadline=None))
    assert seen == {"aot_function"}
    assert set(COMPILE_BACKENDS) > seen


def _run(config: FuzzConfig):
    """A seeded run of a planted wrong backward, as its tally and shrunk failure."""
    target = Target("unit_wrong_square", WrongSquare.apply, "x: n", max_side=3)
    try:
        tally = fuzz("grad", target, replace(config, seed=3), settings=settings(max_examples=20, database=None,
                                                                                 deadline=None))
        return tally.counts, tally.cases, None
    except FuzzFailure as failure:
        assert failure.tally is not None
        record = sorted(p.name for p in Path(failure.record_path).parent.glob("*.json")) if failure.record_path else []
        return failure.tally.counts, failure.tally.cases, (failure.case.to_json(), record)


def test_a_run_is_its_config(tmp_path):
    """fuzz() takes its settings from the config alone: the same settings, the same run."""
    first = _run(FuzzConfig(variants=3, structures=2, corpus=tmp_path / "a"))
    environ = {"FUZZDIFF_VARIANTS": "3", "FUZZDIFF_STRUCTURES": "2"}
    assert _run(FuzzConfig.resolve(environ, corpus=tmp_path / "b")) == first
    counts, cases, (case, record) = first
    assert counts["fail"] >= 1 and len(record) == 1  # a real failure, recorded in each run's corpus


def test_a_path_given_as_a_string_is_a_path():
    config = FuzzConfig(corpus="records", journal_dir="journal")
    assert (config.corpus, config.journal_dir) == (Path("records"), Path("journal"))


def test_without_a_config_fuzz_runs_at_the_defaults_not_the_environment(monkeypatch):
    """The environment is for the drivers to read (fuzzdiff.commands, fuzzdiff.api,
    the pytest plugin): below them, no config means FuzzConfig()."""
    monkeypatch.setenv("FUZZDIFF_VARIANTS", "3")
    monkeypatch.setenv("FUZZDIFF_STRUCTURES", "2")
    monkeypatch.setenv("FUZZDIFF_COMPILE_BACKENDS", "inductor")
    tally = fuzz("grad", get_target("sin"), settings=settings(max_examples=3, database=None, deadline=None,
                                                               derandomize=True))
    # at least the default structures // 2 per example, each at the default variants (the environment's: 18 at most)
    defaults = FuzzConfig()
    assert tally.examples >= 3 * (defaults.structures // 2) * defaults.variants
    assert (environ_config().variants, environ_config().compile_backends) == (3, ("inductor",))  # a driver's


def test_the_pytest_plugin_hands_its_fuzz_loops_the_session_config(pytestconfig, monkeypatch):
    """Resolved once at the session's start (profile sizes, then $FUZZDIFF_*, then
    options), without a corpus: a loop writes records where it asks."""
    options = pytest_plugin.fuzz_options(pytestconfig)
    config = options["config"]
    assert set(options) == {"config", "settings"}  # what fuzz(check, target, **fuzz_options) takes
    name = pytestconfig._fuzzdiff_profile.split("+")[0]
    sizes = FuzzConfig(variants=pytest_plugin.VARIANTS[name], structures=pytest_plugin.STRUCTURES[name])
    assert config == replace(FuzzConfig.resolve(os.environ, base=sizes, redis_url=config.redis_url), corpus=None)
    monkeypatch.setenv("FUZZDIFF_TIMEOUT", "0.25")  # read at the session's start, not later
    assert pytest_plugin.fuzz_options(pytestconfig)["config"] == config


def test_fuzz_and_run_campaign_take_a_config_and_their_work_nothing_beside():
    """One channel for settings: a run's configuration is its FuzzConfig, so
    fuzz() and run_campaign() stay small (every parameter counted)."""
    import inspect

    from fuzzdiff.campaign.loop import run_campaign

    for fn in (fuzz, run_campaign):
        parameters = inspect.signature(fn).parameters
        assert len(parameters) <= 6, (fn.__name__, list(parameters))
        assert "config" in parameters
