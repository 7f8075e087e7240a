"""The node agent (``manage.py run_agent``): one per host, it runs the engines the fleet
placed on its node.

Each step it beats (its node's heartbeat key in Redis), runs a reconciler pass if no other
agent is running one (``controlplane/fleet/reconciler.py``), then syncs its engines with the
replica records placed on its node:

- a pending replica is started (``manage.py run_engine`` as a supervised child, new engine id
  per attempt; a GPU replica pinned to its GPU, ``engine_launch.py``), ``starting`` until the process runs, ``loading`` until its engine status
  record is live, then ``ready``;
- an engine that exits on its own is restarted after a back-off that doubles each time; after
  ``max_restarts`` restarts in a row the replica is ``failed`` with the exit code and its log's
  tail. An engine that ran for ``STABLE_RUN_S`` before it exited starts a new row (back-off
  and count from the first again), so crashes weeks apart never add up to a failed replica;
- a replica set ``draining`` (scaled down), or gone (undeployed), or taken from this node
  (lost) has its engine SIGTERMed: engines drain, then exit; a draining one ends ``stopped``.

On SIGTERM or SIGINT the agent stops every engine (all drain at once), marks its replicas
stopped and its node gone. Engines die with the agent even when it is SIGKILLed (the
supervisor's parent-death signal). Never imports torch: engines are separate processes.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import redis
from django.conf import settings
from django.db import DatabaseError, close_old_connections

from controlplane.common.engine_statuses import find_engine_statuses
from controlplane.common.outages import DATA_OUTAGE_ERRORS
from controlplane.fleet.agent_writes import (
    node_heartbeat,
    node_leave,
    node_register,
    replica_update,
)
from controlplane.fleet.liveness import node_beat
from controlplane.fleet.models import Node, Replica
from controlplane.fleet.reconciler import reconcile_once
from controlplane.fleet.selectors import node_replicas
from controlplane.launcher.engine_launch import engine_environment, engine_options
from controlplane.launcher.process_commands import REPO, run_engine_command
from controlplane.launcher.supervisor import Child, Supervisor
from engine.protocol import Keys
from engine.redis_outage import TRANSPORT_ERRORS, OutageLog

logger = logging.getLogger(__name__)

State = Replica.State
# Seconds past its drain timeout before a draining engine is SIGKILLed: the engine's own drain
# ends at the timeout, and exiting (freeing CUDA memory, closing Redis) takes a moment more.
# Deploy manifests give the agent at least drain timeout + this margin to stop.
ENGINE_KILL_MARGIN_S = 5.0
# An engine that ran this long before it exited was not crash-looping (Kubernetes resets a
# container's back-off after the same 10 minutes).
STABLE_RUN_S = 600.0


@dataclass
class AgentSettings:
    name: str
    var_dir: Path
    labels: dict[str, str] = field(default_factory=dict)
    heartbeat_s: float = 1.0
    node_ttl_s: float = 5.0
    max_restarts: int = 3
    backoff_s: float = 2.0
    drain_timeout_s: float = 30.0
    memory_bytes: int | None = None  # None: the host's

    def __post_init__(self) -> None:
        if self.node_ttl_s <= self.heartbeat_s:
            raise ValueError("the node TTL must be longer than the heartbeat interval")
        if self.max_restarts < 0 or self.backoff_s < 0:
            raise ValueError("max_restarts and backoff_s must be 0 or more")


def host_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def host_gpus() -> list[dict]:
    """The GPUs nvidia-smi lists (name, memory_bytes); none without nvidia-smi. Read from the
    tool, not torch, so the agent stays light."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return []
    query = [tool, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        logger.warning("nvidia-smi failed; reporting no GPUs", exc_info=True)
        return []
    gpus = []
    for line in out.stdout.strip().splitlines():
        name, _, mib = line.rpartition(",")
        gpus.append({"name": name.strip(), "memory_bytes": int(float(mib)) * 2**20})
    return gpus


@dataclass
class Engine:
    """This agent's process for one replica: None between attempts."""

    child: Child | None = None
    next_start_at: float = 0.0
    stop_deadline: float | None = None  # set once SIGTERMed
    started_at: float = 0.0  # time.monotonic() of the last start
    crashes_in_a_row: int = 0  # exits without a stable run between them


class NodeAgent:
    def __init__(self, config: AgentSettings, client: redis.Redis):
        self.config = config
        self.client = client
        self.keys = Keys(settings.PLATFORM_REDIS_PREFIX)
        self.supervisor = Supervisor()
        self.engines: dict[int, Engine] = {}
        self.node: Node | None = None

    # ------------------------------------------------------------------ lifecycle

    def register(self) -> Node:
        self.node = node_register(
            self.client,
            name=self.config.name,
            ttl_s=self.config.node_ttl_s,
            address=socket.gethostname(),
            num_cpus=os.cpu_count() or 0,
            memory_bytes=self.config.memory_bytes or host_memory_bytes(),
            gpus=host_gpus(),
            labels=self.config.labels,
        )
        logger.info("node %s registered", self.node.name)
        return self.node

    def run(self, stop: threading.Event) -> None:
        """Step every beat until ``stop`` is set, then shut down. The Redis heartbeat has its
        own thread, so a step slowed by the database (SQLite waits on other writers' locks)
        does not make the node look lost."""
        outage = OutageLog(
            logger, f"registering node {self.config.name}", service="the database or Redis"
        )
        while not self._registered(outage) and not stop.wait(self.config.heartbeat_s):
            pass
        if self.node is None:
            return
        beating = threading.Thread(target=self._beat, args=(stop,), daemon=True)
        beating.start()
        # The database or Redis away: a line when the outage starts and one when it ends,
        # not a traceback every beat. The agent keeps its engines and tries again each beat.
        outage = OutageLog(logger, "agent step", service="the database or Redis")
        try:
            while not stop.is_set():
                try:
                    self.step()
                    outage.answered()
                except DATA_OUTAGE_ERRORS as exc:
                    outage.failed(exc)
                except Exception:  # a log folder unwritable, a bug: told in full, retried
                    logger.exception("agent step failed; retrying")
                stop.wait(self.config.heartbeat_s)
        finally:
            stop.set()
            beating.join()
            self.shutdown()

    def _registered(self, outage: OutageLog) -> bool:
        try:
            self.register()
            outage.answered()
        except DATA_OUTAGE_ERRORS as exc:  # an agent started before the database or Redis
            outage.failed(exc)
        except (DatabaseError, redis.RedisError):
            logger.warning("registering node %s failed; retrying", self.config.name, exc_info=True)
        return self.node is not None

    def _beat(self, stop: threading.Event) -> None:
        outage = OutageLog(logger, "heartbeat")
        while not stop.is_set():
            try:
                node_beat(self.client, self.config.name, ttl_s=self.config.node_ttl_s)
                outage.answered()
            except TRANSPORT_ERRORS as exc:
                outage.failed(exc)
            except redis.RedisError:
                logger.warning("heartbeat failed", exc_info=True)
            stop.wait(self.config.heartbeat_s)

    def step(self) -> None:
        close_old_connections()
        node_heartbeat(self.node)
        reconcile_once(self.client)
        self.sync()

    def shutdown(self) -> None:
        """SIGTERM every engine (all drain at once), leave (the replicas stopped: the
        reconciler places them elsewhere while these drain), then wait for the engines: all
        of them within one drain timeout (plus the kill margin), however many there are, so
        a pod's grace period bounds it; what still runs then is killed."""
        children = [e.child for e in self.engines.values() if e.child is not None]
        for child in children:
            self.supervisor.terminate(child)
        deadline = time.monotonic() + self.config.drain_timeout_s + ENGINE_KILL_MARGIN_S
        try:
            node_leave(self.client, self.node)
        except (DatabaseError, redis.RedisError):  # its heartbeat expires all the same
            logger.warning("node %s could not record leaving", self.config.name, exc_info=True)
        while any(child.running() for child in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        for child in self.supervisor.children:
            child.stop_timeout = 0  # past the shared deadline: kill (and sweep) what is left
        self.supervisor.stop_all()
        logger.info("node %s left", self.config.name)

    # ------------------------------------------------------------------ engines

    def sync(self) -> None:
        replicas = {replica.pk: replica for replica in node_replicas(node=self.node)}
        for pk in [pk for pk in self.engines if pk not in replicas]:
            self._stop(pk)  # undeployed, lost, or stopped by someone else
        for replica in replicas.values():
            self._sync_replica(replica)

    def _sync_replica(self, replica: Replica) -> None:
        engine = self.engines.setdefault(replica.pk, Engine())
        if replica.state == State.DRAINING:
            if not self._stop(replica.pk):
                replica_update(replica, state=State.STOPPED)
            return
        if engine.child is None:
            if time.monotonic() >= engine.next_start_at:
                self._start(replica, engine)
        elif engine.child.running():
            state = State.READY if self._engine_live(replica) else State.LOADING
            if replica.state != state:
                replica_update(replica, state=state, reason="")
        else:
            self._crashed(replica, engine)

    def _start(self, replica: Replica, engine: Engine) -> None:
        deployment = replica.deployment
        attempt = f"r{replica.pk}-{replica.restarts}-{uuid.uuid4().hex[:4]}"
        engine_id = f"{deployment.name}-{attempt}".replace(":", "-")
        if not replica_update(replica, state=State.STARTING, engine_id=engine_id):
            return  # the reconciler changed it meanwhile
        log_path = self.config.var_dir / "log" / f"engine-{engine_id}.log"
        engine.child = self.supervisor.start(
            Child(
                f"engine:{engine_id}",
                run_engine_command(deployment.served_model.name, **self._options(replica)),
                log_path,
                env=engine_environment(self._pinned_gpu(replica), os.environ),
                stop_timeout=self.config.drain_timeout_s + ENGINE_KILL_MARGIN_S,
                cwd=REPO,
            )
        )
        engine.started_at = time.monotonic()
        logger.info("started %s (replica %d) pid %d", engine_id, replica.pk, engine.child.pid)

    def _options(self, replica: Replica) -> dict:
        return engine_options(
            replica.deployment,
            engine_id=replica.engine_id,
            redis_url=settings.REDIS_URL,
            drain_timeout_s=self.config.drain_timeout_s,
            gpu_index=self._pinned_gpu(replica),
            replica_bytes=replica.memory_bytes,
            node_gpus=self.node.gpus if self.node is not None else [],
        )

    @staticmethod
    def _pinned_gpu(replica: Replica) -> int | None:
        """The GPU a GPU replica's engine is pinned to (None on a CPU: never pinned)."""
        return replica.gpu_index if replica.deployment.device == "cuda" else None

    def _engine_live(self, replica: Replica) -> bool:
        model = replica.deployment.served_model.name
        found = find_engine_statuses(
            self.client, self.keys, model=model, engine_id=replica.engine_id
        )
        return any(not status.draining for status in found)

    def _crashed(self, replica: Replica, engine: Engine) -> None:
        child = engine.child
        code, tail = child.process.returncode, child.log_tail(20)
        self.supervisor.stop(child)
        engine.child = None
        stable = time.monotonic() - engine.started_at >= STABLE_RUN_S
        engine.crashes_in_a_row = 1 if stable else engine.crashes_in_a_row + 1
        if engine.crashes_in_a_row > self.config.max_restarts:
            reason = (
                f"engine exited with code {code} after {self.config.max_restarts} restarts in "
                "a row; gave up (see the log tail)"
            )
            replica_update(replica, state=State.FAILED, reason=reason, log_tail=tail)
            self.engines.pop(replica.pk, None)
            logger.warning("replica %d failed: %s", replica.pk, reason)
            return
        restarts = replica.restarts + 1  # in all: the replica's record keeps the total
        delay = self.config.backoff_s * 2 ** (engine.crashes_in_a_row - 1)
        engine.next_start_at = time.monotonic() + delay
        reason = f"engine exited with code {code}; restart {restarts} in {delay:.1f}s"
        replica_update(
            replica, state=State.STARTING, restarts=restarts, reason=reason, log_tail=tail
        )
        logger.warning("replica %d: %s", replica.pk, reason)

    def _stop(self, pk: int) -> bool:
        """Drain and stop replica ``pk``'s engine: SIGTERM once, SIGKILL past the drain
        timeout; forgotten once it has exited. True while it still runs."""
        engine = self.engines.get(pk)
        child = engine.child if engine is not None else None
        if child is None or not child.running():
            if child is not None:
                self.supervisor.stop(child)  # sweep its group
            self.engines.pop(pk, None)
            return False
        if engine.stop_deadline is None:
            self.supervisor.terminate(child)
            engine.stop_deadline = time.monotonic() + child.stop_timeout
        elif time.monotonic() > engine.stop_deadline:
            child.stop_timeout = 0
            self.supervisor.stop(child)  # SIGKILL now
            self.engines.pop(pk, None)
            return False
        return True
