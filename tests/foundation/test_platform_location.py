"""The running platform's location file (var/run/redis.json): written private, found while its
serve process lives, ignored once it is gone, and read by settings when REDIS_URL is unset."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

from controlplane.common.platform_location import (
    find_running_platform,
    forget_running_platform,
    location_file,
    record_running_platform,
)
from controlplane.launcher.process_commands import REPO, manage_command
from controlplane.launcher.redis_server import free_port
from tests.foundation.settings_probe import settings_of_a_new_process

SERVE_REDIS = "redis://127.0.0.1:41234/0"


def _exited_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_record_is_private_and_found_while_its_process_lives(tmp_path):
    path = record_running_platform(tmp_path, redis_url=SERVE_REDIS)
    assert path == tmp_path / "run" / "redis.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["pid"] == os.getpid()
    found = find_running_platform(tmp_path)
    assert (found.redis_url, found.pid) == (SERVE_REDIS, os.getpid())


def test_record_of_a_dead_process_is_ignored(tmp_path):
    record_running_platform(tmp_path, redis_url=SERVE_REDIS, pid=_exited_pid())
    assert find_running_platform(tmp_path) is None


def test_record_of_a_reused_pid_is_ignored(tmp_path):
    path = record_running_platform(tmp_path, redis_url=SERVE_REDIS)
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "pid_started": "1"}))  # another process's start time
    assert find_running_platform(tmp_path) is None


def test_missing_or_garbled_record_means_no_platform(tmp_path):
    assert find_running_platform(tmp_path) is None
    location_file(tmp_path).parent.mkdir(parents=True)
    location_file(tmp_path).write_text("{not json")
    assert find_running_platform(tmp_path) is None


def test_only_the_recording_process_removes_the_record(tmp_path):
    record_running_platform(tmp_path, redis_url=SERVE_REDIS, pid=os.getppid())
    forget_running_platform(tmp_path)  # another serve's record stays
    assert location_file(tmp_path).exists()
    record_running_platform(tmp_path, redis_url=SERVE_REDIS)
    forget_running_platform(tmp_path)
    assert not location_file(tmp_path).exists()


def _settings_redis(var_dir, **env) -> list[str]:
    """REDIS_URL and where it came from, as a freshly started process sees them."""
    return settings_of_a_new_process(
        var_dir,
        "REDIS_URL",
        "REDIS_URL_SOURCE",
        unset={"REDIS_URL"},
        PLATFORM_DEFAULT_REDIS_URL="redis://127.0.0.1:1/0",
        **env,
    )


def test_settings_take_redis_from_the_environment_then_serve_then_the_default(tmp_path):
    assert _settings_redis(tmp_path) == ["redis://127.0.0.1:1/0", "default"]
    record_running_platform(tmp_path, redis_url=SERVE_REDIS)  # this test process plays serve
    assert _settings_redis(tmp_path) == [SERVE_REDIS, "serve"]
    explicit = "redis://10.0.0.1:6379/2"
    assert _settings_redis(tmp_path, REDIS_URL=explicit) == [explicit, "environment"]
    record_running_platform(tmp_path, redis_url=SERVE_REDIS, pid=_exited_pid())
    assert _settings_redis(tmp_path) == ["redis://127.0.0.1:1/0", "default"]


def test_a_second_serve_from_the_same_var_dir_refuses_to_start(tmp_path):
    record_running_platform(tmp_path, redis_url=SERVE_REDIS)  # this test process plays serve
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    result = subprocess.run(
        manage_command("serve", "--no-engine", "--port", str(free_port())),
        cwd=REPO,
        env={**env, "PLATFORM_VAR_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert f"a platform is already running from {tmp_path} (serve pid {os.getpid()}" in (
        result.stderr
    )
    assert find_running_platform(tmp_path).pid == os.getpid()  # the first one's record stays
