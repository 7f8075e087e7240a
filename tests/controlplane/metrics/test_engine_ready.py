"""The engine container's readiness probe, run as Kubernetes and compose run it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from engine import protocol
from engine.protocol import EngineStatus, Keys


def _probe(redis_url: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    return subprocess.run(
        [sys.executable, "-m", "controlplane.metrics.engine_ready", *args],
        env={**env, "REDIS_URL": redis_url},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _publish(redis_client, engine_id: str, *, draining: bool = False) -> None:
    status = EngineStatus(
        engine_id=engine_id, model="tiny", draining=draining, updated_at=time.time()
    )
    redis_client.set(Keys().status("tiny", engine_id), protocol.encode_status(status), ex=5)


@pytest.mark.slow
def test_ready_only_while_this_engine_publishes_and_is_not_draining(redis_client, redis_server):
    url = redis_server.url
    not_yet = _probe(url, "--model", "tiny", "--engine-id", "pod-a")
    assert not_yet.returncode == 1 and "no live engine record" in not_yet.stderr

    _publish(redis_client, "pod-b")  # another replica's record does not make pod-a ready
    assert _probe(url, "--model", "tiny", "--engine-id", "pod-a").returncode == 1
    assert _probe(url, "--model", "tiny").returncode == 0  # any engine of the model

    _publish(redis_client, "pod-a")
    ready = _probe(url, "--model", "tiny", "--engine-id", "pod-a")
    assert ready.returncode == 0 and "pod-a" in ready.stdout

    _publish(redis_client, "pod-a", draining=True)
    assert _probe(url, "--model", "tiny", "--engine-id", "pod-a").returncode == 1
    alive = _probe(url, "--model", "tiny", "--engine-id", "pod-a", "--allow-draining")
    assert alive.returncode == 0


def test_unreachable_redis_is_not_ready_and_missing_config_is_an_error(redis_client):
    down = _probe("redis://127.0.0.1:1/0", "--model", "tiny")
    assert down.returncode == 1 and "Redis unreachable" in down.stderr
    no_url = subprocess.run(
        [sys.executable, "-m", "controlplane.metrics.engine_ready", "--model", "tiny"],
        env={k: v for k, v in os.environ.items() if k != "REDIS_URL"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert no_url.returncode == 2 and "REDIS_URL" in no_url.stderr
