"""The reconciler's part for scale-to-zero deployments (rules in ``scale_to_zero.py``):

1. ``before_placement``: woken deployments whose replica became ready are counted as cold
   starts (``cold_starts.py``, and an audit event with the seconds); then a scale-to-zero
   deployment idle for its ``idle_timeout_s`` goes to 0 replicas (``unload_idle``), and the
   same pass drains its engines.
2. ``after_placement``: a replica that fit no live node gets room by unloading the least
   recently active idle scale-to-zero deployment on a node where it then fits (one per pass:
   the freed memory counts once the evicted engines have drained and stopped, so later passes
   place the replica instead of evicting more).

Every write is conditional on what the pass read (a deployment's ``replicas`` and
``updated_at``), so a request's wake that lands mid-pass is never undone by it.
"""

from __future__ import annotations

import logging
import time

import redis
from django.conf import settings
from django.db.models import Max
from django.utils import timezone

from controlplane.audit.services import audit_record
from controlplane.common.engine_statuses import read_engine_statuses
from controlplane.fleet.cold_starts import cold_start_record
from controlplane.fleet.demand import SYSTEM_ACTOR, last_used, wake_key
from controlplane.fleet.models import ACTIVE_STATES, RUNNING_STATES, Deployment, Node, Replica
from controlplane.fleet.placement import Need
from controlplane.fleet.scale_to_zero import (
    Activity,
    Eviction,
    NodeLoad,
    Placed,
    choose_eviction,
    fits_after_drains,
    is_idle,
)
from controlplane.fleet.selectors import replica_need
from engine.protocol import Keys

logger = logging.getLogger(__name__)

State = Replica.State


def _loaded() -> list[Deployment]:
    """Scale-to-zero deployments that want replicas: what may be unloaded or evicted."""
    qs = Deployment.objects.filter(scale_to_zero=True, replicas__gt=0)
    return list(qs.select_related("served_model").order_by("name"))


def _activities(client: redis.Redis, deployments: list[Deployment]) -> dict[str, Activity]:
    models = sorted({d.served_model.name for d in deployments})
    used = last_used(client, models)
    statuses = read_engine_statuses(client, Keys(settings.PLATFORM_REDIS_PREFIX))
    busy = {s.model for s in statuses if s.num_running or s.num_waiting}
    # A placed replica still coming up pauses the idle clock: it starts once the engine is
    # ready, so an engine is never unloaded (or evicted) before it could serve anything.
    coming_up = set(
        Replica.objects.filter(
            deployment__in=deployments,
            node__isnull=False,
            state__in=(State.PENDING, State.STARTING, State.LOADING),
        ).values_list("deployment_id", flat=True)
    )
    changed = dict(
        Replica.objects.filter(deployment__in=deployments, state__in=ACTIVE_STATES)
        .values_list("deployment_id")
        .annotate(latest=Max("updated_at"))
    )
    activities = {}
    for d in deployments:
        times = [used.get(d.served_model.name, 0.0), d.updated_at.timestamp()]
        if d.pk in changed:
            times.append(changed[d.pk].timestamp())
        active = d.served_model.name in busy or d.pk in coming_up
        activities[d.name] = Activity(last_active=max(times), busy=active)
    return activities


def _scale_to_zero(client: redis.Redis, deployment: Deployment, action: str, details: dict) -> bool:
    """0 replicas if nothing changed it since it was read; the audit event and no cold start
    left pending (a wake that never became ready is not one)."""
    written = Deployment.objects.filter(
        pk=deployment.pk, replicas=deployment.replicas, updated_at=deployment.updated_at
    ).update(replicas=0, updated_at=timezone.now())
    if not written:
        return False
    client.delete(wake_key(deployment.name))
    audit_record(
        actor_label=SYSTEM_ACTOR,
        action=action,
        target=deployment,
        details={"model": deployment.served_model.name, "replicas": [deployment.replicas, 0]}
        | details,
    )
    return True


def unload_idle(client: redis.Redis) -> list[str]:
    """Scale idle scale-to-zero deployments to 0; their names."""
    deployments = _loaded()
    if not deployments:
        return []
    now = time.time()
    activities = _activities(client, deployments)
    unloaded = []
    for d in deployments:
        activity = activities[d.name]
        if is_idle(activity, now=now, idle_timeout_s=d.idle_timeout_s):
            details = {
                "idle_s": round(activity.idle_for(now), 1),
                "idle_timeout_s": d.idle_timeout_s,
            }
            if _scale_to_zero(client, d, "deployment.unload", details):
                unloaded.append(d.name)
    if unloaded:
        logger.info("scale to zero: unloaded idle %s", ", ".join(unloaded))
    return unloaded


def before_placement(client: redis.Redis) -> None:
    """Count finished cold starts first, while their ready replicas are still ready (a scale
    to 0 since the last pass retires them in this one), then unload idle deployments."""
    record_cold_starts(client)
    unload_idle(client)


def after_placement(client: redis.Redis, nodes: list[Node]) -> None:
    """Evict for a replica left waiting."""
    evict_for_waiting(client, nodes)


def _node_loads(nodes: list[Node]) -> list[NodeLoad]:
    loads = {
        n.name: NodeLoad(
            name=n.name,
            memory_bytes=n.memory_bytes,
            labels=dict(n.labels or {}),
            gpu_memory_bytes=[int(g.get("memory_bytes", 0)) for g in n.gpus or []],
        )
        for n in nodes
    }
    placed = Replica.objects.filter(node__in=nodes, state__in=ACTIVE_STATES)
    for r in placed.select_related("node", "deployment"):
        need = Need(memory_bytes=r.memory_bytes, gpu=r.deployment.device == "cuda")
        draining = r.state == State.DRAINING
        entry = Placed(r.deployment.name, need, draining=draining, gpu=r.gpu_index)
        loads[r.node.name].placed.append(entry)
    return list(loads.values())


def evict_for_waiting(client: redis.Redis, nodes: list[Node]) -> Eviction | None:
    """Unload one idle scale-to-zero deployment so that the oldest replica waiting for a node
    that can fit after it does (see the module docstring); what was evicted, if anything."""
    waiting = Replica.objects.filter(state=State.PENDING, node__isnull=True).order_by("pk")
    waiting = list(waiting.select_related("deployment", "deployment__served_model"))
    candidates = _loaded() if waiting and nodes else []
    if not candidates:
        return None
    loads = _node_loads(nodes)
    activities = _activities(client, candidates)
    now = time.time()
    for replica in waiting:
        need = replica_need(replica.deployment)
        if fits_after_drains(need, loads):
            continue  # room is on its way: engines still draining
        requester = replica.deployment.name
        choice = choose_eviction(need, loads, activities, now=now, requester=requester)
        if choice is None:
            continue
        victim = next(d for d in candidates if d.name == choice.deployment)
        details = {"for": requester, "node": choice.node}
        if _scale_to_zero(client, victim, "deployment.evict", details):
            _retire_all(victim, reason=f"evicted for {requester}")
            replica.reason = f"waiting for {victim} (evicted) to drain on {choice.node}"
            replica.save(update_fields=["reason", "updated_at"])
            logger.info("scale to zero: evicted %s from %s for %s", victim, choice.node, requester)
            return choice
    return None


def _retire_all(deployment: Deployment, *, reason: str) -> None:
    """Now, not at the next pass: the memory must show as draining before anything else is
    evicted for the same replica."""
    running = Replica.objects.filter(deployment=deployment, state__in=RUNNING_STATES)
    running.filter(node__isnull=False).update(
        state=State.DRAINING, reason=reason, updated_at=timezone.now()
    )
    running.filter(node__isnull=True).update(
        state=State.STOPPED, reason=reason, updated_at=timezone.now()
    )


def record_cold_starts(client: redis.Redis) -> None:
    """A woken deployment with a ready replica: one cold start, from the wake to the moment
    its agent saw the engine live (``updated_at`` of the ready replica)."""
    deployments = list(Deployment.objects.filter(scale_to_zero=True).select_related("served_model"))
    if not deployments:
        return
    markers = client.mget([wake_key(d.name) for d in deployments])
    for deployment, marker in zip(deployments, markers, strict=True):
        if marker is None:
            continue
        ready = deployment.replicas_set.filter(state=State.READY).order_by("updated_at")
        replica = ready.select_related("node").first()
        if replica is None:
            if deployment.replicas == 0:  # scaled back to 0 before it was ready: none
                client.delete(wake_key(deployment.name))
            continue  # still loading
        if not client.delete(wake_key(deployment.name)):
            continue  # another pass counted it
        seconds = max(0.0, replica.updated_at.timestamp() - float(marker))
        model = deployment.served_model.name
        cold_start_record(client, model, seconds)
        audit_record(
            actor_label=SYSTEM_ACTOR,
            action="deployment.cold_start",
            target=deployment,
            details={
                "model": model,
                "seconds": round(seconds, 2),
                "replica": replica.pk,
                "engine_id": replica.engine_id,
                "node": replica.node.name if replica.node else "",
            },
        )
        logger.info("cold start of %s: ready in %.1f s", deployment, seconds)
