"""A Daphne started fresh beside a running platform, with a Redis prefix and a database file of
its own, so the lockouts it provokes (every test connects from 127.0.0.1) and the database it
breaks touch no other test."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from controlplane.launcher.process_commands import daphne_command
from controlplane.launcher.redis_server import free_port
from tests.support.api_platform import Platform
from tests.support.processes import running


def isolated_env(served: Platform, workdir: Path) -> dict[str, str]:
    """``served``'s environment with a Redis prefix and a database file of its own."""
    database = workdir / "db.sqlite3"
    source = Path(served.env["DATABASE_URL"].removeprefix("sqlite:///"))
    shutil.copyfile(source, database)
    return {
        **served.env,
        "PLATFORM_REDIS_PREFIX": f"fault-{uuid.uuid4().hex[:8]}",
        "DATABASE_URL": f"sqlite:///{database}",
    }


@dataclass
class Daphne:
    base_url: str
    process: subprocess.Popen


@contextmanager
def fresh_daphne(env: dict[str, str], workdir: Path) -> Iterator[Daphne]:
    """A Daphne just started from daphne_command, binding its port as deploy/ starts it
    (serve hands Daphne a socket it opened with the same backlog: api_sockets.py)."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    with running(
        daphne_command("127.0.0.1", port),
        env,
        workdir / "daphne.log",
        ready=lambda: httpx.get(f"{base_url}/health", timeout=2).status_code == 200,
        what="daphne",
        timeout=60,
    ) as process:
        yield Daphne(base_url, process)
