"""The shared example database, against a real redis-server on loopback."""

import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, Phase, settings

from fuzzdiff.campaign.database import ENV, example_database
from fuzzdiff.config import FuzzConfig
from fuzzdiff.search.fuzzing import FuzzFailure, fuzz

BUGGY = '''
import torch
from fuzzdiff import Target


class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        return 3 * g  # the bug


DOUBLE = Target("double", Double.apply, "x: n", origin="shared_bug:DOUBLE")
'''

# Run on "another machine": a fresh process and a fresh local directory; only
# replaying saved examples (no generation), so a failure can only come from Redis.
REPLAY = '''
import sys
import unittest
from hypothesis import HealthCheck, Phase, settings
import os
from fuzzdiff.config import FuzzConfig
from fuzzdiff.campaign.database import example_database
from fuzzdiff.search.fuzzing import FuzzFailure, fuzz
from shared_bug import DOUBLE
db = example_database(FuzzConfig.resolve(os.environ).redis_url, local=sys.argv[1])
try:
    fuzz("grad", DOUBLE, FuzzConfig(variants=4, structures=1),
         settings=settings(database=db, phases=[Phase.reuse], deadline=None, suppress_health_check=list(HealthCheck)))
except FuzzFailure as failure:
    print("FOUND", failure.case.args[0].shape)
except unittest.SkipTest:  # nothing saved to replay
    print("NOTHING")
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url():
    server = shutil.which("redis-server")
    if server is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed; .ci/run installs it")
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    pytest.importorskip("redis")
    import redis

    port = _free_port()
    proc = subprocess.Popen([server, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail(f"redis-server did not start on port {port}")
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_two_local_directories_share_through_redis(redis_url, tmp_path):
    first = example_database(redis_url, local=tmp_path / "a")
    second = example_database(redis_url, local=tmp_path / "b")
    first.save(b"key", b"value")
    assert list(second.fetch(b"key")) == [b"value"]
    assert list(example_database("", local=tmp_path / "c").fetch(b"key")) == []


def test_a_failure_found_on_one_machine_replays_on_another(redis_url, tmp_path):
    (tmp_path / "shared_bug.py").write_text(BUGGY)
    sys.path.insert(0, str(tmp_path))
    try:
        from shared_bug import DOUBLE
        with pytest.raises(FuzzFailure):
            fuzz("grad", DOUBLE, FuzzConfig(variants=4, structures=1), settings=settings(
                database=example_database(redis_url, local=tmp_path / "here"), max_examples=50,
                deadline=None, suppress_health_check=list(HealthCheck), phases=list(Phase)[:-1]))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("shared_bug", None)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), ENV: redis_url}
    there = subprocess.run([sys.executable, "-c", REPLAY, str(tmp_path / "there")], env=env,
                           capture_output=True, text=True, timeout=300)
    assert "FOUND" in there.stdout, there.stdout + there.stderr
    alone = subprocess.run([sys.executable, "-c", REPLAY, str(tmp_path / "alone")],
                           env={**env, ENV: ""}, capture_output=True, text=True, timeout=300)
    assert "NOTHING" in alone.stdout, alone.stdout + alone.stderr


def test_unreachable_redis_is_a_clear_error(tmp_path):
    pytest.importorskip("redis")
    with pytest.raises(RuntimeError, match="cannot reach the shared example database"):
        example_database(f"redis://127.0.0.1:{_free_port()}/0", local=tmp_path)
