"""A fleet platform for real-process tests: a private Redis, one SQLite file every process
shares, Daphne, and node agents (``manage.py run_agent``) with distinct names and var dirs
standing for hosts, and when asked a Celery worker, brought up by the launcher
(controlplane.launcher.stack) as ``manage.py serve`` brings up its own.

:func:`fleet_platform` sets the database up in one ``manage.py shell`` (migrate, register the
models, a tenant and its API key, optionally an admin superuser), starts the agents, the
worker and Daphne side by side and waits until Daphne answers, every agent beats and the
worker consumes. No engine is started: deploying is the test's job
(:meth:`FleetPlatform.deploy`).

Replica states are read from the database file directly (sqlite3), not through Django, so a
test sees what the agents wrote the moment they wrote it.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

from controlplane.common.engine_statuses import find_engine_statuses
from controlplane.launcher.process_commands import celery_worker_command, manage_command
from controlplane.launcher.stack import Stack
from controlplane.launcher.stack import run_manage as run_manage_once
from controlplane.launcher.supervisor import Child
from engine.protocol import EngineStatus, Keys
from tests.support.manage_server import run_manage
from tests.support.metrics_scrape import Scrape
from tests.support.migrated_database import migrate_sqlite_in_advance
from tests.support.platform_services import database_path
from tests.support.sdk_clients import SdkClients

ADMIN_PASSWORD = "fleet-admin-pass-123"
TENANT = "acme"
# Engine settings that keep a tiny model's engine small on a shared 2-core machine: as the
# admin's deployment form names them, and as ``manage.py deploy`` flags.
TINY_ENGINE_SETTINGS = {"kv_cache_gb": "0.25", "max_model_len": "256", "cpu_threads": "1"}
ENGINE_OPTIONS = tuple(
    item
    for setting, value in TINY_ENGINE_SETTINGS.items()
    for item in ("--" + setting.replace("_", "-"), value)
)
_CALL_COMMAND = "from django.core.management import call_command as c"
_MOVING = {"pending", "starting", "loading", "draining"}


@dataclass(frozen=True)
class Agent:
    """One node agent: a host of its own (var dir ``workdir/agent-NAME``)."""

    name: str
    memory_gb: float = 8  # what a tiny model's replica needs, with room to spare
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AgentTiming:
    """``run_agent``'s timing flags; None leaves the agent's default. Quick beats by default,
    so that an agent notices a new deployment within a second."""

    heartbeat: float = 0.5
    node_ttl: float = 5
    max_restarts: int | None = None
    backoff: float | None = None
    drain_timeout: float | None = None

    def flags(self) -> list[str]:
        given = {
            "--heartbeat": self.heartbeat,
            "--node-ttl": self.node_ttl,
            "--max-restarts": self.max_restarts,
            "--backoff": self.backoff,
            "--drain-timeout": self.drain_timeout,
        }
        return [item for flag, v in given.items() if v is not None for item in (flag, str(v))]


class FleetPlatform(SdkClients):
    def __init__(self, stack: Stack, api_key: str, base_url: str = ""):
        self.stack = stack
        self.api_key = api_key
        self.base_url = base_url
        self.db_path = database_path(stack.workdir)
        self.redis = redis.Redis.from_url(stack.redis_url)
        self.agents: dict[str, Child] = {}

    @property
    def env(self) -> dict[str, str]:
        return self.stack.env

    @property
    def node(self) -> str:
        """The name of the platform's only agent."""
        (name,) = self.agents
        return name

    # ------------------------------------------------------------------ processes

    def manage(self, *args: str) -> str:
        """``manage.py ARGS`` on this platform: its stdout."""
        return run_manage(self.env, *args, timeout=120).stdout

    def call_commands(self, *commands: Sequence[str]) -> str:
        """Several management commands, each ``(name, *args)``, in one ``manage.py shell``."""
        calls = [f"c(*{tuple(command)!r})" for command in commands]
        return self.manage("shell", "-c", "\n".join([_CALL_COMMAND, *calls]))

    def deploy(self, *deployments: Sequence[str]) -> None:
        """``manage.py deploy NAME ARGS`` with the tiny engine settings, for each
        ``(NAME, *ARGS)``, in one process."""
        self.call_commands(*(("deploy", *d, *ENGINE_OPTIONS) for d in deployments))

    def start_agents(self, agents: Sequence[Agent], timing: AgentTiming) -> None:
        """Start ``agents`` without waiting for them (:meth:`live_nodes` says when they beat)."""
        for agent in agents:
            var_dir = self.stack.workdir / f"agent-{agent.name}"
            command = manage_command("run_agent", "--name", agent.name, "--var-dir", str(var_dir))
            labels = ["--labels", *(f"{k}={v}" for k, v in agent.labels.items())]
            memory = ["--memory-gb", str(agent.memory_gb)]
            flags = [*(labels if agent.labels else []), *memory, *timing.flags()]
            self.agents[agent.name] = self.stack.start(f"agent-{agent.name}", command + flags)

    def kill_agent_and_engines(self, name: str) -> None:
        """SIGKILL an agent and its engines at once: a host that lost power."""
        agent = self.agents.pop(name)
        for pid in [agent.pid, *_descendants(agent.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        agent.process.wait()
        self.stack.forget(agent.process)

    def wait(self, condition, *, what: str, timeout: float = 120) -> None:
        """Until ``condition()``; fails early, with its log, if an agent or Daphne died."""
        self.stack.wait_until(condition, timeout=timeout, what=what)

    # ------------------------------------------------------------------ what the fleet shows

    def query(self, sql: str, *params) -> list[dict]:
        with sqlite3.connect(self.db_path, timeout=20) as db:
            db.row_factory = sqlite3.Row
            return [dict(row) for row in db.execute(sql, params)]

    def replicas(self, deployment: str) -> list[dict]:
        return self.query(
            "SELECT r.id, r.state, r.engine_id, r.reason, r.log_tail, r.restarts, "
            "r.generation, r.created_at, n.name AS node "
            "FROM fleet_replica r JOIN fleet_deployment d ON r.deployment_id = d.id "
            "LEFT JOIN fleet_node n ON r.node_id = n.id WHERE d.name = ? ORDER BY r.id",
            deployment,
        )

    def ready(self, deployment: str) -> list[dict]:
        return [r for r in self.replicas(deployment) if r["state"] == "ready"]

    def settled(self, deployment: str, count: int) -> bool:
        """``count`` replicas ready and none on the way in or out."""
        states = [r["state"] for r in self.replicas(deployment)]
        return states.count("ready") == count and not _MOVING & set(states)

    def wanted(self, deployment: str) -> int:
        (row,) = self.query("SELECT replicas FROM fleet_deployment WHERE name = ?", deployment)
        return row["replicas"]

    def audit(self, action: str) -> list[dict]:
        rows = self.query(
            "SELECT target_repr, actor_label, details FROM audit_auditevent "
            "WHERE action = ? ORDER BY id",
            action,
        )
        return [{**row, "details": json.loads(row["details"])} for row in rows]

    def live_nodes(self) -> set[str]:
        found = self.redis.scan_iter(match=f"{self.stack.redis_prefix}:fleet:node:*")
        return {key.decode().rsplit(":", 1)[-1] for key in found}

    def engine_statuses(self, model: str) -> list[EngineStatus]:
        return find_engine_statuses(self.redis, Keys(self.stack.redis_prefix), model=model)

    def engine_live(self, model: str, engine_id: str) -> bool:
        return any(s.engine_id == engine_id for s in self.engine_statuses(model))

    def metrics(self) -> Scrape:
        response = httpx.get(f"{self.base_url}/metrics", timeout=10)
        response.raise_for_status()
        return Scrape(response.text)


@contextmanager
def fleet_platform(
    workdir: Path,
    *,
    models: Mapping[str, Path],
    agents: Sequence[Agent] = (Agent("node-1"),),
    timing: AgentTiming = AgentTiming(),
    env: Mapping[str, str] | None = None,
    admin: bool = False,
    redis_prefix: str = "fleettest",
    celery: bool = False,
) -> Iterator[FleetPlatform]:
    """A fleet platform under ``workdir``: ``models`` (name: checkpoint) registered, a tenant
    (:data:`TENANT`) with an API key for the SDK, with ``admin`` a superuser ``admin``
    (:data:`ADMIN_PASSWORD`), Daphne and ``agents`` up, with ``celery`` a Celery worker as
    ``manage.py serve`` starts it (default queue: model registrations; no beat, no batch
    worker), every process on ``env`` besides the platform's own settings (one CPU thread each
    unless it says otherwise). Everything it started is stopped after the block, Redis last."""
    stack = Stack(
        workdir,
        redis_prefix=redis_prefix,
        database_url=f"sqlite:///{database_path(workdir)}",
        var_dir=workdir / "var",
        env={"OMP_NUM_THREADS": "1", **(env or {})},
    )
    with stack:
        stack.start_redis()
        output = setup_database(stack.env, models, tenant=TENANT, admin=admin)
        api_key = output.splitlines()[-1]
        platform = FleetPlatform(stack, api_key)
        try:
            platform.start_agents(agents, timing)
            if celery:
                worker = stack.start("celery", celery_worker_command(loglevel="info"))
            platform.base_url = stack.start_daphne(timeout=90)
            names = {agent.name for agent in agents}
            platform.wait(lambda: platform.live_nodes() == names, timeout=60, what="the agents")
            if celery:
                platform.wait(lambda: _celery_ready(worker), timeout=90, what="the Celery worker")
            yield platform
        finally:
            platform.redis.close()


def setup_database(
    env: Mapping[str, str],
    models: Mapping[str, Path],
    *,
    tenant: str | None = None,
    admin: bool = False,
) -> str:
    """In one ``manage.py shell`` on ``env``: migrate and register ``models`` (name:
    checkpoint); with ``admin``, a superuser ``admin`` (:data:`ADMIN_PASSWORD`); with
    ``tenant``, that tenant and the secret of a key for it, alone on the last line of the
    output, which this returns."""
    lines = [
        _CALL_COMMAND,
        "from controlplane.deployments.services import served_model_register as register",
        "c('migrate', interactive=False, verbosity=0)",
        *(f"register(path={str(path)!r}, name={name!r})" for name, path in models.items()),
    ]
    if admin:
        lines.append("from django.contrib.auth import get_user_model")
        lines.append(
            f"get_user_model().objects.create_superuser('admin', 'a@x.test', {ADMIN_PASSWORD!r})"
        )
    if tenant is not None:
        lines.append(f"c('create_tenant', {tenant!r})")
        lines.append(f"c('create_api_key', tenant={tenant!r})")
    migrate_sqlite_in_advance(dict(env))
    # One process that ends (not the fixtures' long-lived command process): tests count what
    # is left running on the platform's environment.
    return run_manage_once(dict(env), "shell", "-c", "\n".join(lines), timeout=300).stdout


def _celery_ready(worker: Child) -> bool:
    """The worker has connected to its broker and consumes (it logs "celery@HOST ready.")."""
    return worker.log_path.exists() and b" ready." in worker.log_path.read_bytes()


def _descendants(pid: int) -> list[int]:
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
