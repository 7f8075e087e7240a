"""One shell or two, the same platform: while `manage.py serve` runs, a command typed in another
shell without REDIS_URL reaches serve's private Redis, not another Redis on the default port.

The serve command records where its Redis is (var/run/redis.json, mode 0600) and removes the
record on exit. A second redis-server stands in for a stray one on 6379 (a test cannot own
that port: PLATFORM_DEFAULT_REDIS_URL points the default at it); the revocation must reach the
API within 2 s, and that Redis must see nothing at all.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import redis

from controlplane.common.platform_location import location_file
from controlplane.launcher.process_commands import REPO, manage_command
from controlplane.launcher.redis_server import RedisServer, free_port
from tests.support.processes import serve_until_up

pytestmark = pytest.mark.slow

NOBODY = "redis://127.0.0.1:1/0"  # nothing listens on port 1


def _second_shell(var_dir: Path, impostor_url: str) -> dict[str, str]:
    """An operator's other shell: the same checkout and var dir, no REDIS_URL, no DEBUG."""
    unset = {"REDIS_URL", "DATABASE_URL", "DJANGO_DEBUG", "DJANGO_SECRET_KEY"}
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(PLATFORM_VAR_DIR=str(var_dir), PLATFORM_DEFAULT_REDIS_URL=impostor_url)
    return env


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        manage_command(*args), cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result


def _models_status(base_url: str, key: str) -> int:
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.get(f"{base_url}/v1/models", headers=headers, timeout=5).status_code


def test_revocation_typed_in_a_second_shell_reaches_the_serve_api_within_2_seconds(
    tmp_path, tiny_llama
):
    var_dir = tmp_path / "var"
    impostor = RedisServer(tmp_path / "impostor").start()
    shell = _second_shell(var_dir, impostor.url)
    # A model registered beforehand, so serve does not spend time making the demo model.
    _manage({**shell, "REDIS_URL": NOBODY}, "migrate", "-v0")
    _manage({**shell, "REDIS_URL": NOBODY}, "load_model", str(tiny_llama), "--name", "tiny")

    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    serve, _, demo_key = serve_until_up(shell, "--no-engine", "--port", str(port), timeout=180)
    try:
        record_path = location_file(var_dir)
        assert stat.S_IMODE(record_path.stat().st_mode) == 0o600
        record = json.loads(record_path.read_text())
        assert record["pid"] == serve.pid and record["redis_url"] != impostor.url
        serve_redis = redis.Redis.from_url(record["redis_url"])
        epoch_key = "llmp:auth:epoch"
        epoch_before = int(serve_redis.get(epoch_key) or 0)

        assert _models_status(base_url, demo_key) == 200
        nope = httpx.get(f"{base_url}/no-such-page", timeout=5)
        assert nope.status_code == 404 and "URLconf" not in nope.text  # DEBUG is off

        revoked = _manage(shell, "revoke_api_key", demo_key[:11])
        refused_by = time.monotonic() + 2.0
        assert "revoked key" in revoked.stdout
        assert "no running platform" not in revoked.stderr
        while _models_status(base_url, demo_key) != 401:
            assert time.monotonic() < refused_by, "the API still accepts the revoked key"
            time.sleep(0.1)

        assert int(serve_redis.get(epoch_key) or 0) > epoch_before
        impostor_client = redis.Redis.from_url(impostor.url)
        assert impostor_client.dbsize() == 0, impostor_client.keys()
        serve_redis.close()
        impostor_client.close()
    finally:
        serve.send_signal(signal.SIGINT)
        try:
            serve.wait(timeout=60)
        finally:
            impostor.stop()
    assert not location_file(var_dir).exists()

    # With serve gone, a command run now says it found no platform.
    alone = _manage(shell, "create_tenant", "Later")
    assert "warning: no running platform found" in alone.stderr
