"""The platform as an operator runs it, for the control plane's end-to-end tests.

A private Redis (other tests empty the session's), a migrated SQLite file, the tiny llama
registered with ``manage.py load_model``, a superuser, one engine process and Daphne on a free
port. Started once for this directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from controlplane.launcher.process_commands import engine_command
from tests.controlplane.support.shared_database import FileDatabase
from tests.support.platform_services import (
    engine_status_records,
    platform_services,
    serving_daphne,
)
from tests.support.processes import running

MODEL = "tiny-cp"
PREFIX = "cpe2e"
ADMIN_PASSWORD = "admin-pass-123"


@dataclass
class LivePlatform:
    base_url: str
    redis_url: str
    db: FileDatabase
    workdir: Path

    def engine_statuses(self) -> list[bytes | None]:
        return engine_status_records(self.redis_url, PREFIX, MODEL)


@pytest.fixture(scope="package")
def live_platform(tmp_path_factory, tiny_llama):
    workdir = tmp_path_factory.mktemp("cp-e2e")
    with platform_services(workdir, redis_prefix=PREFIX) as services:
        db = FileDatabase(services.database_path, services.redis.url)
        db.env.update(services.env, DJANGO_SUPERUSER_PASSWORD=ADMIN_PASSWORD)
        db.manage("load_model", str(tiny_llama), "--name", MODEL)
        db.manage("createsuperuser", "--noinput", "--username", "admin", "--email", "a@x.test")
        with serving_daphne(db.env, workdir / "daphne.log", timeout=90) as base_url:
            platform = LivePlatform(
                base_url=base_url, redis_url=services.redis.url, db=db, workdir=workdir
            )
            with running(
                engine_command(tiny_llama, MODEL, redis_url=services.redis.url, device="cpu"),
                db.env,
                workdir / "engine.log",
                ready=lambda: bool(platform.engine_statuses()),
                what="engine",
                timeout=180,
            ):
                yield platform
