"""Real processes for fault tests: the platform of tests/inference (Redis, database, an engine,
Daphne), fresh Daphne processes beside it, and manage.py run as an operator runs it.

A fresh Daphne for throttling tests gets its own Redis key prefix and its own copy of the
database, so the lockouts it provokes (every test connects from 127.0.0.1) and the database it
breaks touch no other test.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from controlplane.core.process_commands import manage_command
from tests.inference.conftest import (  # noqa: F401 (fixtures: this package gets its own platform)
    Platform,
    api_platform,
    api_server,
    auth,
    platform,
    platform_env,
)
from tests.support.platform_services import serving_daphne
from tests.support.processes import REPO


def manage(env: dict[str, str], *args: str) -> str:
    """``manage.py ARGS`` in a subprocess with the platform's environment: its stdout."""
    done = subprocess.run(
        manage_command(*args), cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def create_key(env: dict[str, str], *scopes: str, tenant: str = "acme") -> str:
    """A new key of ``tenant`` (the secret is the last line create_api_key prints)."""
    flags = [arg for scope in scopes for arg in ("--scope", scope)]
    out = manage(env, "create_api_key", "--tenant", tenant, "--name", "fault-test", *flags)
    return out.strip().splitlines()[-1]


def isolated_env(platform: Platform, workdir: Path) -> dict[str, str]:
    """The platform's environment with a Redis prefix and a database file of its own."""
    database = workdir / "db.sqlite3"
    source = Path(platform.env["DATABASE_URL"].removeprefix("sqlite:///"))
    shutil.copyfile(source, database)
    return {
        **platform.env,
        "PLATFORM_REDIS_PREFIX": f"fault-{uuid.uuid4().hex[:8]}",
        "DATABASE_URL": f"sqlite:///{database}",
    }


@contextmanager
def fresh_daphne(env: dict[str, str], workdir: Path) -> Iterator[str]:
    """A Daphne just started (from daphne_command, as serve starts it): its base URL."""
    with serving_daphne(env, workdir / "daphne.log", timeout=60) as base_url:
        yield base_url
