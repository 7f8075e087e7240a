"""Reads on the fleet: deployments, what one replica needs, what each live node has left, which
nodes are live, and the replica counts the admin, the REST API and /metrics show."""

from __future__ import annotations

import logging
from pathlib import Path

import redis
from django.db.models import Count

from controlplane.common.redis_clients import sync_redis
from controlplane.deployments.models import ServedModel
from controlplane.deployments.selectors import served_models_by_name
from controlplane.fleet.liveness import live_node_names, node_is_live
from controlplane.fleet.models import ACTIVE_STATES, Deployment, Node, Replica
from controlplane.fleet.placement import GIB, Need, NodeRoom, replica_memory_bytes
from engine.redis_outage import warn_failure

logger = logging.getLogger(__name__)


def deployment_get(*, name: str) -> Deployment | None:
    return Deployment.objects.select_related("served_model").filter(name=name).first()


def deployment_list() -> list[Deployment]:
    return list(Deployment.objects.select_related("served_model"))


def served_models_undeployed() -> list[ServedModel]:
    """The ready, active models no deployment runs: registered, but serving nowhere until one
    is added (bin/serve declares one per model at start; a model added later waits for it)."""
    return list(served_models_by_name().filter(fleet_deployments__isnull=True))


def _checkpoint_bytes(path: str) -> int:
    """The weights' size on disk (for a model registered without a parameter count)."""
    root = Path(path)
    files = [root] if root.is_file() else [*root.glob("*.safetensors"), *root.glob("*.bin")]
    return sum(f.stat().st_size for f in files if f.is_file())


def replica_need(deployment: Deployment) -> Need:
    """What one engine of ``deployment`` needs (placement.py says how it is estimated)."""
    model = deployment.served_model
    # A pooling engine keeps no KV cache: its setting, if any, reserves nothing.
    kv_cache_bytes = 0 if model.is_embedding else int(deployment.kv_cache_gb * GIB)
    if model.num_parameters:
        memory = replica_memory_bytes(
            num_parameters=model.num_parameters,
            dtype=deployment.dtype or model.dtype,
            quantization=deployment.quantization or model.quantization,
            kv_cache_bytes=kv_cache_bytes,
        )
    else:
        memory = replica_memory_bytes(
            num_parameters=_checkpoint_bytes(model.path),
            dtype="int8",
            kv_cache_bytes=kv_cache_bytes,
        )
    return Need(
        memory_bytes=memory,
        gpu=deployment.device == "cuda",
        selector=dict(deployment.node_selector or {}),
    )


def node_rooms(nodes: list[Node]) -> dict[str, NodeRoom]:
    """Each node's capacity less what its active replicas hold (by the estimate each was
    placed with, on the GPU each was given)."""
    rooms = {
        node.name: NodeRoom(
            name=node.name,
            free_bytes=node.memory_bytes,
            labels=dict(node.labels or {}),
            gpu_free_bytes=[int(gpu.get("memory_bytes", 0)) for gpu in node.gpus or []],
        )
        for node in nodes
    }
    placed = Replica.objects.filter(node__in=nodes, state__in=ACTIVE_STATES).select_related(
        "node", "deployment"
    )
    for replica in placed:
        gpu = replica.deployment.device == "cuda"
        need = Need(memory_bytes=replica.memory_bytes, gpu=gpu)
        rooms[replica.node.name].occupy(need, replica.gpu_index)  # on the GPU it runs on
    return rooms


def node_replicas(*, node: Node) -> list[Replica]:
    """The replicas an agent must act on: those placed on its node with a process to run or
    stop."""
    qs = Replica.objects.filter(node=node, state__in=ACTIVE_STATES)
    return list(qs.select_related("deployment", "deployment__served_model"))


def nodes_live() -> set[str] | None:
    """Names of the nodes whose heartbeat key is in Redis now; None when Redis cannot be read
    (the admin then says "unknown" rather than calling every node dead)."""
    try:
        return live_node_names(sync_redis())
    except redis.RedisError as exc:
        warn_failure(logger, exc, "fleet: cannot read node heartbeats from Redis")
        return None


def node_live(*, name: str) -> bool | None:
    """Whether ``name``'s heartbeat key is in Redis now (None: Redis cannot be read)."""
    try:
        return node_is_live(sync_redis(), name)
    except redis.RedisError:
        logger.warning("fleet: cannot read node heartbeats from Redis", exc_info=True)
        return None


def node_list() -> list[Node]:
    return list(Node.objects.all())


def node_get(*, name: str) -> Node | None:
    return Node.objects.filter(name=name).first()


def deployment_replica_list(*, deployment: Deployment) -> list[Replica]:
    """Every replica record of ``deployment`` (stopped and lost ones too), oldest first."""
    return list(deployment.replicas_set.select_related("node").order_by("pk"))


def replica_state_counts() -> list[tuple[str, str, str, int]]:
    """(deployment, model, state, count) for every deployment and replica state it has."""
    rows = (
        Replica.objects.values_list("deployment__name", "deployment__served_model__name", "state")
        .annotate(count=Count("pk"))
        .order_by()
    )
    return list(rows)


def replicas_unplaced() -> dict[str, int]:
    """Per deployment, the replicas waiting for a node (none fitted: placement failed)."""
    rows = (
        Replica.objects.filter(node__isnull=True, state=Replica.State.PENDING)
        .values_list("deployment__name")
        .annotate(count=Count("pk"))
        .order_by()
    )
    return dict(rows)
