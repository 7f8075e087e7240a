"""A fleet platform for real-process tests: the session's Redis (under a prefix of its own), one
SQLite file every process shares, Daphne, and node agents with distinct names and var dirs
(standing for hosts), as ``tests/controlplane/fleet/test_agents.py`` runs them.

Replica states are read from the database file directly (sqlite3), not through Django, so a
test sees what the agents wrote the moment they wrote it.
"""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path

import redis

from controlplane.common.engine_statuses import find_engine_statuses
from controlplane.launcher.process_commands import manage_command, platform_environment
from controlplane.launcher.stack import Stack, run_manage
from engine.protocol import EngineStatus, Keys
from tests.support.sdk_clients import SdkClients

PREFIX = "fleettest"
# Quick beats and a short node TTL so a lost agent is noticed within seconds; engines get a
# drain long enough for the short streams the load tests run to finish.
AGENT_OPTIONS = (
    *("--heartbeat", "0.5", "--node-ttl", "2", "--max-restarts", "1"),
    *("--backoff", "0.2", "--drain-timeout", "60", "--memory-gb", "8"),
)
ENGINE_OPTIONS = ("--kv-cache-gb", "0.25", "--cpu-threads", "1", "--max-model-len", "256")


class FleetPlatform(SdkClients):
    def __init__(self, workdir: Path, redis_url: str):
        self.db_path = workdir / "db.sqlite3"
        self.env = platform_environment(
            redis_url=redis_url,
            redis_prefix=PREFIX,
            database_url=f"sqlite:///{self.db_path}",
            var_dir=workdir / "var",
        )
        self.env["OMP_NUM_THREADS"] = "1"
        self.stack = Stack(workdir, env=self.env)
        self.stack.env = self.env
        self.redis = redis.Redis.from_url(redis_url)
        self.agents = {}
        self.base_url = ""
        self.api_key = ""

    # ------------------------------------------------------------------ processes

    def manage(self, *args: str) -> str:
        return run_manage(self.env, *args, timeout=120).stdout

    def start_daphne(self) -> None:
        """Daphne on this platform, and a tenant with a key for the SDK."""
        self.manage("create_tenant", "fleet")
        self.api_key = self.manage("create_api_key", "--tenant", "fleet").splitlines()[-1]
        self.base_url = self.stack.start_daphne(timeout=90)

    def start_agent(self, name: str) -> None:
        var_dir = self.stack.workdir / f"agent-{name}"
        command = manage_command("run_agent", "--name", name, "--var-dir", str(var_dir))
        self.agents[name] = self.stack.start(f"agent-{name}", [*command, *AGENT_OPTIONS])

    def kill_agent_and_engines(self, name: str) -> None:
        """SIGKILL an agent and its engines at once: a host that lost power."""
        agent = self.agents.pop(name)
        victims = [agent.pid, *_children(agent.pid)]
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        agent.process.wait()
        self.stack.forget(agent.process)

    def stop(self) -> None:
        self.stack.stop()
        self.redis.close()

    # ------------------------------------------------------------------ what the fleet shows

    def replicas(self, deployment: str) -> list[dict]:
        with sqlite3.connect(self.db_path, timeout=20) as db:
            db.row_factory = sqlite3.Row
            rows = db.execute(
                "SELECT r.id, r.state, r.engine_id, r.reason, r.log_tail, r.restarts, "
                "r.generation, r.created_at, n.name AS node "
                "FROM fleet_replica r JOIN fleet_deployment d ON r.deployment_id = d.id "
                "LEFT JOIN fleet_node n ON r.node_id = n.id WHERE d.name = ? ORDER BY r.id",
                (deployment,),
            )
            return [dict(row) for row in rows]

    def ready(self, deployment: str) -> list[dict]:
        return [r for r in self.replicas(deployment) if r["state"] == "ready"]

    def settled(self, deployment: str, count: int) -> bool:
        """``count`` replicas ready and none on the way in or out."""
        states = [r["state"] for r in self.replicas(deployment)]
        moving = {"pending", "starting", "loading", "draining"}
        return states.count("ready") == count and not moving & set(states)

    def wait(self, condition, *, timeout: float, what: str) -> None:
        """Until ``condition()``; fails early, with its log, if an agent or Daphne died."""
        self.stack.wait_until(condition, timeout=timeout, what=what)

    def live_nodes(self) -> set[str]:
        found = self.redis.scan_iter(match=f"{PREFIX}:fleet:node:*")
        return {key.decode().rsplit(":", 1)[-1] for key in found}

    def engine_statuses(self, model: str) -> list[EngineStatus]:
        return find_engine_statuses(self.redis, Keys(PREFIX), model=model)

    def engine_live(self, model: str, engine_id: str) -> bool:
        return any(s.engine_id == engine_id for s in self.engine_statuses(model))


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (engines, their workers), read from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        found.extend(kids)
        todo.extend(kids)
    return found
