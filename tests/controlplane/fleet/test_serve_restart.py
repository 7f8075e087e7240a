"""bin/serve through the fleet, started twice on one var folder: each time its agent runs the
model's deployment and the API answers; the second start finds one node (this host) and one
running replica, the first run's replica stopped; Ctrl-C leaves no process behind.

A tiny random-weight checkpoint is registered beforehand, so serve makes no demo model
(tests/foundation/test_serve_command.py runs the demo model path).
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import time
from pathlib import Path

import openai
import pytest

from controlplane.launcher.redis_server import free_port
from tests.support.fleet_platform import setup_database
from tests.support.processes import autogroup_nice, nice_of, pids_with_env, serve_until_up

pytestmark = pytest.mark.slow

NOBODY = "redis://127.0.0.1:1/0"  # nothing listens on port 1


def _ctrl_c(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


def _completion(port: int, key: str) -> str:
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0)
    reply = client.completions.create(model="tiny", prompt="hello", max_tokens=4)
    return reply.choices[0].finish_reason


def _fleet_rows(db: Path) -> tuple[list[tuple], list[tuple]]:
    with sqlite3.connect(db, timeout=20) as conn:
        nodes = conn.execute("SELECT name, state FROM fleet_node ORDER BY id").fetchall()
        replicas = conn.execute(
            "SELECT r.state, n.name FROM fleet_replica r LEFT JOIN fleet_node n "
            "ON r.node_id = n.id ORDER BY r.id"
        ).fetchall()
    return nodes, replicas


def _priorities(marker: str) -> dict[str, list]:
    """The nice value of every thread of the platform's engines and API servers, and the
    engines' autogroup lines (absent where the kernel has none)."""
    found: dict[str, list] = {"engine": [], "api": [], "autogroup": []}
    for pid in pids_with_env(marker):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            threads = [nice_of(stat) for stat in Path(f"/proc/{pid}/task").glob("*/stat")]
        except OSError:  # ended meanwhile
            continue
        if b"run_engine" in command or b"engine" in command[1:3]:
            found["engine"] += threads
            if (autogroup := autogroup_nice(pid)) is not None:
                found["autogroup"].append(autogroup)
        elif any(b"daphne" in part for part in command):
            found["api"] += threads
    return found


def test_serve_runs_its_model_through_the_agent_and_restarts_cleanly(tmp_path, tiny_llama):
    var_dir = tmp_path / "var"
    unset = {"REDIS_URL", "DATABASE_URL", "DJANGO_DEBUG"}
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(PLATFORM_VAR_DIR=str(var_dir), OMP_NUM_THREADS="1")
    env["PLATFORM_CPU_KVCACHE_SPACE"] = "0.25"  # the tiny model needs little
    marker = f"PLATFORM_VAR_DIR={var_dir}"
    setup = {**env, "REDIS_URL": NOBODY}
    setup_database(setup, {"tiny": tiny_llama})
    host = socket.gethostname()

    port = free_port()
    serve, output, key = serve_until_up(env, "--port", str(port))
    try:
        assert f"tiny: replica 1 ready on {host}" in output
        assert _completion(port, key) in {"stop", "length"}
        # The CPU engine yields the cores to the API and Redis (engine/process_priority.py).
        # (Relative to this process's nice value, which every child starts with.)
        inherited = os.getpriority(os.PRIO_PROCESS, 0)
        priorities = _priorities(marker)
        assert priorities["engine"] and set(priorities["engine"]) == {max(5, inherited)}
        assert set(priorities["autogroup"]) <= {"5"}
        assert priorities["api"] and set(priorities["api"]) == {inherited}
    finally:
        _ctrl_c(serve)

    port = free_port()
    serve, output, key = serve_until_up(env, "--port", str(port))
    try:
        assert _completion(port, key) in {"stop", "length"}
        nodes, replicas = _fleet_rows(var_dir / "db.sqlite3")
        assert nodes == [(host, "ready")]
        assert replicas == [("stopped", host), ("ready", host)]
    finally:
        _ctrl_c(serve)
    time.sleep(0.5)
    assert pids_with_env(marker) == [], "processes of the platform were left running"
    nodes, replicas = _fleet_rows(var_dir / "db.sqlite3")
    assert nodes == [(host, "gone")]
    assert replicas == [("stopped", host), ("stopped", host)]
