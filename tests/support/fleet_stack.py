"""A platform whose engines the fleet runs, for end-to-end tests of deploying from outside
(the admin, the management API): its own Redis and SQLite file, one registered tiny model, a
superuser, a tenant key, Daphne and one node agent (``manage.py run_agent``). No engine is
started: deploying one is the test's job."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

from controlplane.launcher.process_commands import manage_command
from controlplane.launcher.stack import Stack
from tests.support.platform_services import database_path, platform_stack
from tests.support.sdk_clients import SdkClients
from tests.support.shared_database import FileDatabase

ADMIN_PASSWORD = "fleet-admin-pass-123"
# Quick beats so that the agent notices a new deployment within a second; memory offered is
# what the tiny model's replica needs, with room to spare.
AGENT_OPTIONS = ("--heartbeat", "0.5", "--node-ttl", "5", "--memory-gb", "8")
# Engine settings that keep a tiny model's engine small on a shared 2-core machine.
TINY_ENGINE_SETTINGS = {"kv_cache_gb": "0.25", "max_model_len": "256", "cpu_threads": "1"}


@dataclass
class FleetPlatform(SdkClients):
    base_url: str
    api_key: str
    model: str
    node: str
    db: FileDatabase
    stack: Stack

    def wait(self, condition, *, what: str, timeout: float = 120) -> None:
        self.stack.wait_until(condition, timeout=timeout, what=what, children=[])

    def replicas(self, deployment: str) -> list[dict]:
        """The replica records of ``deployment``, read from the database file."""
        with sqlite3.connect(self.db.path, timeout=20) as db:
            db.row_factory = sqlite3.Row
            rows = db.execute(
                "SELECT r.state, r.engine_id, r.reason, n.name AS node FROM fleet_replica r "
                "JOIN fleet_deployment d ON r.deployment_id = d.id "
                "LEFT JOIN fleet_node n ON r.node_id = n.id WHERE d.name = ? ORDER BY r.id",
                (deployment,),
            )
            return [dict(row) for row in rows]


@contextmanager
def fleet_platform(
    workdir: Path, checkpoint: Path, *, model: str, redis_prefix: str
) -> Iterator[FleetPlatform]:
    node = "node-1"
    with platform_stack(workdir, redis_prefix=redis_prefix) as stack:
        db = FileDatabase(database_path(workdir), stack.redis_url)
        db.env.update(stack.env, DJANGO_SUPERUSER_PASSWORD=ADMIN_PASSWORD, OMP_NUM_THREADS="1")
        db.manage("load_model", str(checkpoint), "--name", model)
        db.manage("createsuperuser", "--noinput", "--username", "admin", "--email", "a@x.test")
        db.manage("create_tenant", "acme")
        api_key = db.create_key("acme")
        stack.env = db.env
        base_url = stack.start_daphne(timeout=90)
        agent = manage_command("run_agent", "--name", node, "--var-dir", str(workdir / "agent"))
        heartbeat = f"{redis_prefix}:fleet:node:{node}"
        client = redis.Redis.from_url(stack.redis_url)
        try:
            stack.start(
                f"agent-{node}",
                [*agent, *AGENT_OPTIONS],
                ready=lambda: bool(client.exists(heartbeat)),
                timeout=60,
            )
        finally:
            client.close()
        yield FleetPlatform(
            base_url=base_url, api_key=api_key, model=model, node=node, db=db, stack=stack
        )
