"""The platform for end-to-end fixtures, brought up by the launcher (controlplane.launcher.stack)
as ``manage.py serve`` brings it up: a private Redis, a migrated SQLite file, then whatever
engines and Daphne the fixture starts on the stack."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from controlplane.launcher.stack import Stack
from tests.support.migrated_database import copy_migrated_database


@contextmanager
def platform_stack(
    workdir: Path, *, redis_prefix: str, appendfsync: str | None = None
) -> Iterator[Stack]:
    """A stack under ``workdir`` with its own Redis (other tests empty the session's) and a
    migrated database file, ``workdir/db.sqlite3``; every process it started is stopped after
    the block, Redis last."""
    with Stack(
        workdir,
        redis_prefix=redis_prefix,
        database_url=f"sqlite:///{database_path(workdir)}",
        var_dir=workdir / "var",
    ) as stack:
        stack.start_redis(appendfsync=appendfsync)
        copy_migrated_database(database_path(workdir))
        yield stack


@contextmanager
def serving_daphne(env: dict[str, str], log: Path, *, timeout: float) -> Iterator[str]:
    """One more Daphne on ``env`` and a free port, answering /health inside the block: its
    base URL."""
    with Stack(log.parent) as stack:
        yield stack.start_daphne(timeout=timeout, env=env, log=log)


def database_path(workdir: Path) -> Path:
    """The SQLite file of the stack under ``workdir``."""
    return workdir / "db.sqlite3"


def engine_status_records(redis_url: str, prefix: str, model: str) -> list[bytes | None]:
    """The status records the live engines of ``model`` publish (none until one has loaded)."""
    client = redis.Redis.from_url(redis_url)
    try:
        return [client.get(key) for key in client.keys(f"{prefix}:status:{model}:*")]
    finally:
        client.close()
