"""Real processes for fault tests: the platform of tests/inference (Redis, database, an engine,
Daphne), fresh Daphne processes beside it, and manage.py run as an operator runs it.

A fresh Daphne for throttling tests gets its own Redis key prefix and its own copy of the
database, so the lockouts it provokes (every test connects from 127.0.0.1) and the database it
breaks touch no other test.
"""

from __future__ import annotations

import re
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
from controlplane.launcher.stack import run_manage
from tests.inference.conftest import (  # noqa: F401 (fixtures: this package gets its own platform)
    Platform,
    api_platform,
    api_server,
    auth,
    platform,
    platform_env,
)
from tests.support.processes import running


def manage(env: dict[str, str], *args: str) -> str:
    """``manage.py ARGS`` in a subprocess with the platform's environment: its stdout."""
    return run_manage(env, *args, timeout=120).stdout


def create_key(env: dict[str, str], *scopes: str, tenant: str = "acme") -> str:
    """A new key of ``tenant`` (the secret is the last line create_api_key prints)."""
    flags = [arg for scope in scopes for arg in ("--scope", scope)]
    out = manage(env, "create_api_key", "--tenant", tenant, "--name", "fault-test", *flags)
    return out.strip().splitlines()[-1]


def admin_sign_in(
    base_url: str, username: str, password: str, *, address: str = "127.0.0.1"
) -> httpx.Response:
    """One try at the admin's login form from ``address``: a 302 with the session cookie when
    it signed in, else the form again with its error."""
    transport = httpx.HTTPTransport(local_address=address)
    with httpx.Client(base_url=base_url, transport=transport, timeout=30) as client:
        page = client.get("/admin/login/").text
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        return client.post(
            "/admin/login/",
            data={"username": username, "password": password, "csrfmiddlewaretoken": token},
            headers={"Referer": f"{base_url}/admin/login/"},
        )


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
    """A Daphne just started from daphne_command, as serve starts it."""
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
