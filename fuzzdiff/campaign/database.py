"""Hypothesis example databases: this machine's directory, or shared through Redis.

Hypothesis saves every failing example it shrinks, keyed by test (for fuzz():
by check and target), and tries saved examples first on the next run. With
``$FUZZDIFF_REDIS_URL`` (or ``--fuzzdiff-db``) set, the local directory is
multiplexed with a Redis database, so a failure found on one machine or CI
shard is the first thing every other one tries.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase, MultiplexedDatabase

__all__ = ["example_database", "ENV", "KEY_PREFIX"]

ENV = "FUZZDIFF_REDIS_URL"
KEY_PREFIX = b"fuzzdiff-example:"


def example_database(redis_url: str | None = None, local: Path | str = ".hypothesis/examples") -> ExampleDatabase:
    """The local directory database, multiplexed with Redis at ``redis_url``
    when one is given (FuzzConfig.redis_url: ``--db``, ``--fuzzdiff-db`` or
    ``$FUZZDIFF_REDIS_URL``)."""
    url = redis_url
    local_db = DirectoryBasedExampleDatabase(str(local))
    if not url:
        return local_db
    try:  # an optional dependency (the "shared" extra), only needed with a URL
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        raise RuntimeError(
            f"${ENV} / --db / --fuzzdiff-db is set to {url!r} but the 'redis' package is not "
            "installed: pip install redis"
        ) from None
    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.exceptions.RedisError as e:
        raise RuntimeError(f"cannot reach the shared example database at {url!r}: {e}") from None
    return MultiplexedDatabase(local_db, RedisExampleDatabase(client, key_prefix=KEY_PREFIX))
