"""The platform as an operator runs it, for the control plane's end-to-end tests.

A private Redis (other tests empty the session's), a migrated SQLite file, the tiny llama
registered with ``manage.py load_model``, a superuser, one engine process and Daphne on a free
port. Started once for this directory.
"""

from __future__ import annotations

import pytest

from tests.support.live_platform import ADMIN_PASSWORD, MODEL, PREFIX, LivePlatform
from tests.support.platform_services import database_path, platform_stack
from tests.support.shared_database import FileDatabase


@pytest.fixture(scope="package")
def live_platform(tmp_path_factory, tiny_llama):
    workdir = tmp_path_factory.mktemp("cp-e2e")
    with platform_stack(workdir, redis_prefix=PREFIX) as stack:
        db = FileDatabase(database_path(workdir), stack.redis_url)
        db.env.update(stack.env, DJANGO_SUPERUSER_PASSWORD=ADMIN_PASSWORD)
        db.manage("load_model", str(tiny_llama), "--name", MODEL)
        db.manage("createsuperuser", "--noinput", "--username", "admin", "--email", "a@x.test")
        stack.env = db.env
        base_url = stack.start_daphne(timeout=90)
        platform = LivePlatform(
            base_url=base_url, redis_url=stack.redis_url, db=db, workdir=workdir
        )
        stack.start_engine(tiny_llama, MODEL, log=workdir / "engine.log", device="cpu")
        yield platform
