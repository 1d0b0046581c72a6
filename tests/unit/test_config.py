"""FuzzConfig: one frozen object, layered defaults < environment < options,
and every bad setting named with where it came from."""

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import settings

from fuzzdiff.checks import get_check
from fuzzdiff.config import COMPILE_BACKENDS, ConfigError, FuzzConfig
from fuzzdiff.fuzzing import fuzz
from fuzzdiff.targets import get_target


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
    config = FuzzConfig(corpus=Path("/tmp/x"), variants=3, timeout=1.5, compile_backends=("inductor", "aot_eager"))
    assert FuzzConfig.resolve(config.environ()) == config


def test_the_compile_check_draws_only_the_configured_backends():
    seen = set()
    config = FuzzConfig(variants=1, structures=1, compile_backends=("aot_function",))
    target = get_target("exp")

    check = get_check("compile").configured(config)
    real = check.run

    def spy(t, case):
        seen.add(case.params["backend"])
        return real(t, case)

    fuzz(replace(check, run=spy), target, config=config,
         settings=settings(max_examples=6, database=None, deadline=None))
    assert seen == {"aot_function"}
    assert set(COMPILE_BACKENDS) > seen
