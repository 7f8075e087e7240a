"""The fleet against real processes: two node agents (distinct names and var dirs stand for two
hosts) on one SQLite file and the session's Redis, running real engines of a tiny checkpoint.

One module-scoped pair of agents serves the three tests, in order, with two deployments made
once both agents are up (`manage.py deploy`): two replicas of a tiny checkpoint spread over
both agents; a broken checkpoint ends failed after bounded restarts; a SIGKILLed agent's
replica comes back on the other one. Replica states are read from the database file directly.
"""

from __future__ import annotations

import shutil
import sqlite3
import time
from pathlib import Path

import pytest
import redis
from django.test import override_settings

from controlplane.common.engine_statuses import find_engine_statuses
from controlplane.fleet.liveness import live_node_names
from controlplane.launcher.process_commands import manage_command, platform_environment
from controlplane.launcher.stack import Stack, run_manage
from engine.protocol import Keys

pytestmark = pytest.mark.slow

PREFIX = "fleettest"
AGENT_OPTIONS = (
    *("--heartbeat", "0.5", "--node-ttl", "2", "--max-restarts", "1"),
    *("--backoff", "0.2", "--drain-timeout", "2", "--memory-gb", "8"),
)
ENGINE_OPTIONS = ("--kv-cache-gb", "0.25", "--cpu-threads", "1", "--max-model-len", "256")


class Fleet:
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

    def manage(self, *args: str) -> str:
        return run_manage(self.env, *args, timeout=120).stdout

    def start_agent(self, name: str) -> None:
        var_dir = self.stack.workdir / f"agent-{name}"
        command = manage_command("run_agent", "--name", name, "--var-dir", str(var_dir))
        self.agents[name] = self.stack.start(f"agent-{name}", [*command, *AGENT_OPTIONS])

    def replicas(self, deployment: str) -> list[dict]:
        with sqlite3.connect(self.db_path, timeout=20) as db:
            db.row_factory = sqlite3.Row
            rows = db.execute(
                "SELECT r.state, r.engine_id, r.reason, r.log_tail, r.restarts, n.name AS node "
                "FROM fleet_replica r JOIN fleet_deployment d ON r.deployment_id = d.id "
                "LEFT JOIN fleet_node n ON r.node_id = n.id WHERE d.name = ? ORDER BY r.id",
                (deployment,),
            )
            return [dict(row) for row in rows]

    def ready(self, deployment: str) -> list[dict]:
        return [r for r in self.replicas(deployment) if r["state"] == "ready"]

    def wait(self, condition, *, timeout: float, what: str) -> None:
        self.stack.wait_until(condition, timeout=timeout, what=what, children=[])

    def live_nodes(self) -> set[str]:
        with override_settings(PLATFORM_REDIS_PREFIX=PREFIX):
            return live_node_names(self.redis)

    def engine_live(self, model: str, engine_id: str) -> bool:
        return bool(
            find_engine_statuses(self.redis, Keys(PREFIX), model=model, engine_id=engine_id)
        )


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, redis_server, checkpoints):
    workdir = tmp_path_factory.mktemp("fleet")
    broken = shutil.copytree(checkpoints.get("llama"), workdir / "broken")
    fleet = Fleet(workdir, redis_server.url)
    setup = (  # one process: migrate and register both models
        "from django.core.management import call_command; "
        "from controlplane.deployments.services import served_model_register as r; "
        "call_command('migrate', interactive=False, verbosity=0); "
        f"r(path={str(checkpoints.get('llama'))!r}, name='tiny'); "
        f"r(path={str(broken)!r}, name='broken')"
    )
    fleet.manage("shell", "-c", setup)
    for weights in broken.glob("*.safetensors"):
        weights.write_bytes(b"not a safetensors file")
    fleet.start_agent("a")
    fleet.start_agent("b")
    fleet.wait(lambda: fleet.live_nodes() == {"a", "b"}, timeout=60, what="both agents")
    # Both deployments at once (one process): the broken one's restarts overlap the loads.
    deploy = "from django.core.management import call_command as c; " + "; ".join(
        f"c('deploy', {name!r}, '--replicas', '{n}', *{ENGINE_OPTIONS!r})"
        for name, n in (("tiny", 2), ("broken", 1))
    )
    fleet.manage("shell", "-c", deploy)
    yield fleet
    fleet.stack.stop()
    fleet.redis.close()


def test_two_replicas_run_one_ready_engine_on_each_agent(fleet):
    fleet.wait(lambda: len(fleet.ready("tiny")) == 2, timeout=90, what="two ready replicas")
    ready = fleet.ready("tiny")
    assert sorted(r["node"] for r in ready) == ["a", "b"]
    assert all(fleet.engine_live("tiny", r["engine_id"]) for r in ready)


def test_a_broken_checkpoint_ends_failed_after_bounded_restarts(fleet):
    fleet.wait(
        lambda: [r["state"] for r in fleet.replicas("broken")] == ["failed"],
        timeout=90,
        what="the broken replica to fail",
    )
    (replica,) = fleet.replicas("broken")
    assert replica["restarts"] == 1  # --max-restarts 1: tried twice, then gave up
    assert "engine exited with code" in replica["reason"]
    assert replica["log_tail"].strip()


def test_a_killed_agents_replica_is_placed_on_the_other_agent(fleet):
    victim = fleet.agents["b"]
    victim.process.kill()  # its engines get SIGTERM from the parent-death signal
    fleet.stack.forget(victim.process)
    killed_at = time.monotonic()
    fleet.wait(
        lambda: [r["node"] for r in fleet.ready("tiny")] == ["a", "a"],
        timeout=90,
        what="the replacement replica on agent a",
    )
    assert time.monotonic() - killed_at < 30 + 30  # node TTL and reconcile, plus load time
    states = {(r["node"], r["state"]) for r in fleet.replicas("tiny")}
    assert ("b", "lost") in states
