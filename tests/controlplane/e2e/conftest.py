"""The platform as an operator runs it, for the control plane's end-to-end tests.

A private Redis (other tests empty the session's), a migrated SQLite file, the tiny llama
registered with ``manage.py load_model``, a superuser, one engine process and Daphne on a free
port. Started once for this directory.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis

from controlplane.core.redis_server import RedisServer, free_port
from tests.controlplane.support.shared_database import FileDatabase
from tests.support.processes import spawn as _spawn
from tests.support.processes import stop as _stop
from tests.support.processes import wait_for

MODEL = "tiny-cp"
PREFIX = "cpe2e"
ADMIN_PASSWORD = "admin-pass-123"


@dataclass
class LivePlatform:
    base_url: str
    redis_url: str
    db: FileDatabase
    workdir: Path

    def engine_statuses(self) -> list[bytes]:
        client = redis.Redis.from_url(self.redis_url)
        try:
            return [client.get(k) for k in client.keys(f"{PREFIX}:status:{MODEL}:*")]
        finally:
            client.close()


@pytest.fixture(scope="package")
def live_platform(tmp_path_factory, tiny_llama):
    workdir = tmp_path_factory.mktemp("cp-e2e")
    server = RedisServer(workdir / "redis").start()
    db = FileDatabase(workdir / "db.sqlite3", server.url)
    db.env.update(
        {
            "PLATFORM_REDIS_PREFIX": PREFIX,
            "PLATFORM_VAR_DIR": str(workdir / "var"),
            "DJANGO_SUPERUSER_PASSWORD": ADMIN_PASSWORD,
            "PYTHONUNBUFFERED": "1",
        }
    )
    processes: list[subprocess.Popen] = []
    try:
        db.migrate()
        db.manage("load_model", str(tiny_llama), "--name", MODEL)
        db.manage("createsuperuser", "--noinput", "--username", "admin", "--email", "a@x.test")
        engine_log = workdir / "engine.log"
        engine = _spawn(
            [
                sys.executable,
                "-m",
                "engine",
                "--model-path",
                str(tiny_llama),
                "--model-name",
                MODEL,
                "--redis-url",
                server.url,
                "--device",
                "cpu",
            ],
            db.env,
            engine_log,
        )
        processes.append(engine)
        port = free_port()
        daphne_log = workdir / "daphne.log"
        daphne = _spawn(
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "controlplane.asgi:application",
            ],
            db.env,
            daphne_log,
        )
        processes.append(daphne)
        base_url = f"http://127.0.0.1:{port}"
        wait_for(
            lambda: httpx.get(f"{base_url}/health", timeout=2).status_code == 200,
            what="daphne",
            process=daphne,
            log=daphne_log,
            timeout=90,
        )
        platform = LivePlatform(base_url=base_url, redis_url=server.url, db=db, workdir=workdir)
        wait_for(
            lambda: bool(platform.engine_statuses()),
            what="engine",
            process=engine,
            log=engine_log,
            timeout=180,
        )
        yield platform
    finally:
        for process in reversed(processes):
            _stop(process)
        server.stop()
