"""What serve does when one of its children exits (controlplane/launcher/restarts.py), with real
processes: started again after a back-off, given up on when it keeps exiting (with its log),
a stable run starting a new row; its private Redis back on the same port, with what it held
(an append-only file, turned on without losing an older run's snapshot)."""

from __future__ import annotations

import sys
import time

import pytest
import redis

from controlplane.launcher.redis_server import RedisServer
from controlplane.launcher.restarts import GaveUp, Restarter, RestartPolicy
from controlplane.launcher.supervisor import Child, Supervisor

QUICK = RestartPolicy(max_in_a_row=2, backoff_s=0.05, stable_s=60)


def _child(tmp_path, name: str, code: str) -> Child:
    return Child(name, [sys.executable, "-c", code], tmp_path / f"{name}.log")


def _check_until(restarter: Restarter, done, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "not done in time"
        restarter.check()
        time.sleep(0.02)


@pytest.fixture
def supervisor():
    supervisor = Supervisor()
    yield supervisor
    supervisor.stop_all()


def test_a_child_that_exits_is_started_again_and_one_that_keeps_exiting_is_given_up(
    tmp_path, supervisor
):
    # Counts its own starts in a file, then exits at once: a crash loop.
    counter = tmp_path / "starts"
    code = f"import pathlib; p = pathlib.Path({str(counter)!r}); p.write_text(p.read_text() + 'x')"
    counter.write_text("")
    child = supervisor.start(_child(tmp_path, "worker", code + "; print('bad setting'); exit(3)"))
    said: list[str] = []
    restarter = Restarter(supervisor, policy=QUICK, say=said.append)
    with pytest.raises(GaveUp) as gave_up:
        _check_until(restarter, lambda: False)
    assert counter.read_text() == "xxx"  # the start and two restarts in a row
    assert "worker exited with code 3, 3 times in a row" in str(gave_up.value)
    assert "bad setting" in str(gave_up.value)  # its log's last lines
    assert said[0].startswith("worker exited with code 3; starting it again in 0 s")
    assert not child.running()


def test_a_child_that_ran_a_stable_while_starts_a_new_row(tmp_path, supervisor):
    stable = RestartPolicy(max_in_a_row=1, backoff_s=0.05, stable_s=0.3)
    child = supervisor.start(_child(tmp_path, "daphne", "import time; time.sleep(0.4)"))
    restarter = Restarter(supervisor, policy=stable, say=lambda _: None)
    started: set[int] = set()

    def started_four_times() -> bool:
        started.add(child.process.pid)
        return len(started) >= 4

    # Each run ends after a stable while: never given up on (GaveUp would fail the test),
    # though one restart in a row is all this policy allows.
    _check_until(restarter, started_four_times)


def test_a_killed_redis_is_back_on_its_port_with_what_it_saved(tmp_path, supervisor):
    server = RedisServer(tmp_path / "redis", persist=True).start()
    try:
        client = redis.Redis(port=server.port)
        client.set("kept", "1")
        client.save()  # what serve's Redis does every minute
        server.process.kill()
        server.process.wait()
        said: list[str] = []
        restarter = Restarter(supervisor, redis=server, policy=QUICK, say=said.append)
        _check_until(restarter, lambda: server.process.poll() is None and server._ping())
        assert client.get("kept") == b"1"  # the same client, reconnected to the same port
        assert said == ["redis-server exited with code -9; starting it again in 0 s"]
    finally:
        server.stop()


def test_a_snapshot_from_a_run_without_append_only_file_is_kept_when_it_is_turned_on(tmp_path):
    # An older serve's Redis: snapshots only.
    old = RedisServer(tmp_path / "redis", persist=True).start()
    redis.Redis(port=old.port).set("from-the-old-run", "1")
    redis.Redis(port=old.port).save()
    old.stop()
    server = RedisServer(tmp_path / "redis", port=old.port, persist=True, appendfsync="everysec")
    server.start()
    try:
        client = redis.Redis(port=server.port)
        assert client.get("from-the-old-run") == b"1"
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        client.set("written-since", "1")  # no snapshot taken after it
        deadline = time.monotonic() + 10  # the file is written in the background, then fsync'd
        while time.monotonic() < deadline and client.info("persistence")["aof_rewrite_in_progress"]:
            time.sleep(0.05)
        time.sleep(1.5)  # everysec
        server.process.kill()
        server.process.wait()
        server.start()
        assert client.get("from-the-old-run") == b"1" and client.get("written-since") == b"1"
    finally:
        server.stop()
