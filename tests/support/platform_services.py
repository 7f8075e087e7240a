"""The platform's services for end-to-end fixtures: a private Redis, a migrated SQLite file,
Daphne answering /health, and a look at the engines' status records."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import redis

from controlplane.launcher.process_commands import (
    daphne_command,
    migrate_command,
    platform_environment,
)
from controlplane.launcher.redis_server import RedisServer, free_port
from tests.support.processes import REPO, running


@dataclass
class PlatformServices:
    workdir: Path
    redis: RedisServer
    database_path: Path
    env: dict[str, str]  # what every process of this platform runs with


@contextmanager
def platform_services(workdir: Path, *, redis_prefix: str) -> Iterator[PlatformServices]:
    """Redis (private: other tests empty the session's) and a migrated database under
    ``workdir``; Redis stops after the block."""
    server = RedisServer(workdir / "redis").start()
    try:
        database_path = workdir / "db.sqlite3"
        env = platform_environment(
            redis_url=server.url,
            redis_prefix=redis_prefix,
            database_url=f"sqlite:///{database_path}",
            var_dir=workdir / "var",
        )
        subprocess.run(migrate_command(), cwd=REPO, env=env, check=True)
        yield PlatformServices(workdir, server, database_path, env)
    finally:
        server.stop()


@contextmanager
def serving_daphne(env: dict[str, str], log: Path, *, timeout: float) -> Iterator[str]:
    """Daphne on a free port, answering /health inside the block: its base URL."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    with running(
        daphne_command("127.0.0.1", port),
        env,
        log,
        ready=lambda: httpx.get(f"{base_url}/health", timeout=2).status_code == 200,
        what="daphne",
        timeout=timeout,
    ):
        yield base_url


def engine_status_records(redis_url: str, prefix: str, model: str) -> list[bytes | None]:
    """The status records the live engines of ``model`` publish (none until one has loaded)."""
    client = redis.Redis.from_url(redis_url)
    try:
        return [client.get(key) for key in client.keys(f"{prefix}:status:{model}:*")]
    finally:
        client.close()
