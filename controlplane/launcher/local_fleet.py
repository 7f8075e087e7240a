"""The serve command's engines, run through the fleet: one node agent for this host and a
deployment per served model (generation and embeddings), waited for until each has a ready
replica.

bin/serve used to start one ``run_engine`` per model itself; it now declares what should run
(a Deployment of one replica, with the settings it used to pass: none, so the engine's
defaults) and lets the same agent and reconciler that run a multi-host fleet start, restart
and drain the engines. Deployments persist in the database: an operator's ``scale`` or
``deploy`` of them outlives a restart of serve, which only creates the missing ones.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

from controlplane.deployments.models import ServedModel
from controlplane.fleet.models import RUNNING_STATES, Deployment, Replica
from controlplane.fleet.selectors import deployment_get
from controlplane.fleet.services import deployment_deploy
from controlplane.launcher.process_commands import manage_command
from controlplane.launcher.stack import StartupError

ACTOR = "manage.py serve"
# Engines drain this long on Ctrl-C before the agent kills them; the agent itself gets longer.
DRAIN_TIMEOUT_S = 15.0
AGENT_STOP_TIMEOUT_S = DRAIN_TIMEOUT_S + 15.0
_KV_CACHE_ENV = "PLATFORM_CPU_KVCACHE_SPACE"


def local_node_name() -> str:
    return socket.gethostname()


def agent_command(var_dir: Path) -> list[str]:
    """The node agent for this host; its engine logs go to ``var_dir/agent/log``."""
    return manage_command(
        *("run_agent", "--name", local_node_name(), "--var-dir", str(var_dir / "agent")),
        *("--drain-timeout", str(DRAIN_TIMEOUT_S)),
    )


def _available_gib() -> float:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def default_kv_cache_gb() -> float:
    """The KV cache an engine sizes for itself when told nothing (engine/worker/kv_cache.py:
    PLATFORM_CPU_KVCACHE_SPACE, else 10% of available memory, at most 4 GiB, at least 1),
    written down so placement reserves what the engine will take."""
    raw = os.environ.get(_KV_CACHE_ENV, "").strip()
    try:
        if raw and float(raw) > 0:
            return float(raw)
    except ValueError:
        pass  # the engine reports the bad value itself
    return round(max(1.0, min(0.1 * _available_gib(), 4.0)), 2)


def declare_deployments(models: list[ServedModel]) -> list[Deployment]:
    """A deployment of one replica for each model without one (an embeddings model's runs the
    pooling engine, which keeps no KV cache). An existing one is kept as the operator left it;
    its failed replicas are retired (as a deploy does), so this start tries them afresh
    instead of reporting an old failure."""
    declared = []
    for model in models:
        existing = deployment_get(name=model.name)
        if existing is None:
            kv_cache = {} if model.is_embedding else {"kv_cache_gb": default_kv_cache_gb()}
            declared.append(
                deployment_deploy(
                    name=model.name, replicas=1, actor_label=ACTOR, device="auto", **kv_cache
                )
            )
        elif existing.replicas_set.filter(state=Replica.State.FAILED).exists():
            declared.append(
                deployment_deploy(name=existing.name, replicas=existing.replicas, actor_label=ACTOR)
            )
        else:
            declared.append(existing)
    return declared


def _replica_line(deployment: Deployment, replica: Replica) -> str:
    where = f" on {replica.node.name}" if replica.node else ""
    why = f" ({replica.reason})" if replica.reason else ""
    return f"{deployment.name}: replica {replica.pk} {replica.state}{where}{why}"


class ReplicaWatch:
    """The replicas of ``deployments`` as they change: a line for each new state or reason
    (what serve prints while it waits for them, and while the platform runs)."""

    def __init__(self, deployments: list[Deployment]):
        self.deployments = deployments
        self._seen: dict[int, str] = {}

    def replicas(self, deployment: Deployment) -> list[Replica]:
        """Its replicas that run, are on their way, or failed (stopped ones are history)."""
        return list(
            deployment.replicas_set.filter(
                state__in=(*RUNNING_STATES, Replica.State.FAILED)
            ).select_related("node")
        )

    def changes(self, deployment: Deployment, replicas: list[Replica]) -> list[str]:
        lines = []
        for replica in replicas:
            line = _replica_line(deployment, replica)
            if self._seen.get(replica.pk) != line:
                self._seen[replica.pk] = line
                lines.append(line)
        return lines

    def all_changes(self) -> list[str]:
        return [line for d in self.deployments for line in self.changes(d, self.replicas(d))]


def wait_until_ready(
    deployments: list[Deployment],
    *,
    timeout: float,
    alive: Callable[[], None],
    say: Callable[[str], None],
    poll: float = 0.5,
) -> ReplicaWatch:
    """Until every deployment wanting replicas has a ready one. ``say`` hears each replica
    state as it changes; ``alive()`` raises when the agent has died. A replica that ends
    failed fails the wait with its reason and the tail of its engine's log. Returns the watch,
    which goes on reporting from where the wait left off."""
    deadline = time.monotonic() + timeout
    watch = ReplicaWatch(deployments)
    waiting = [d for d in deployments if d.replicas > 0]
    while waiting:
        alive()
        for deployment in list(waiting):
            replicas = watch.replicas(deployment)
            for line in watch.changes(deployment, replicas):
                say(line)
            for replica in replicas:
                if replica.state == Replica.State.FAILED:
                    raise StartupError(
                        f"the engine of {deployment.name} failed: {replica.reason}\n"
                        f"last lines of its log:\n{replica.log_tail}"
                    )
            if any(r.state == Replica.State.READY for r in replicas):
                waiting.remove(deployment)
        if waiting and time.monotonic() > deadline:
            names = ", ".join(d.name for d in waiting)
            raise StartupError(f"no ready replica of {names} after {timeout:.0f}s")
        if waiting:
            time.sleep(poll)
    return watch
