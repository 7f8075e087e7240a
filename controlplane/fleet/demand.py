"""Demand for scale-to-zero deployments: when each model was last used, and waking one up.

- The API touches ``last_used_key(model)`` (a wall-clock time in Redis) as it takes requests,
  at most once a second per model and process (``inference/transport/cold_start.py``); the
  reconciler's demand pass (``demand_pass.py``) reads it to unload idle deployments and to
  pick what to evict. Keyed by the served model, not the deployment: requests name a model,
  and every deployment of it takes them from the same stream.
- ``deployment_wake`` raises a scale-to-zero deployment of a model from 0 replicas to 1 when
  a request finds no live engine; the reconciler places the replica, an agent starts it. The
  wake leaves a marker (``wake_key``) with its time, from which the demand pass measures the
  cold start once a replica is ready.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis
import redis.asyncio as aioredis
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from controlplane.audit.services import audit_record
from controlplane.common.redis_clients import redis_key, sync_redis
from controlplane.fleet.models import RUNNING_STATES, Deployment, Replica

# Who the audit log names for what the fleet does by itself.
SYSTEM_ACTOR = "system (load on demand)"
# A wake marker outlives any request's wait (FLEET_WAKE_TIMEOUT_S) many times over; it only
# bounds what a wake that never became ready leaves behind.
WAKE_MARKER_TTL_S = 3600
# Last-use keys expire long after any idle timeout is likely to matter; a model unused for
# this long is idle whatever its timeout.
LAST_USED_TTL_S = 7 * 24 * 3600


def last_used_key(model: str) -> str:
    return redis_key("fleet", "last_used", model)


def wake_key(deployment: str) -> str:
    return redis_key("fleet", "wake", deployment)


async def atouch_used(client: aioredis.Redis, model: str, now: float | None = None) -> None:
    """Record that ``model`` was just used (the API, per request, rate-limited by its caller)."""
    stamp = repr(time.time() if now is None else now)
    await client.set(last_used_key(model), stamp, ex=LAST_USED_TTL_S)


def touch_used(client: redis.Redis, model: str, now: float | None = None) -> None:
    client.set(last_used_key(model), repr(time.time() if now is None else now), ex=LAST_USED_TTL_S)


def last_used(client: redis.Redis, models: list[str]) -> dict[str, float]:
    """``{model: wall time of its last use}`` for those used within LAST_USED_TTL_S."""
    if not models:
        return {}
    values = client.mget([last_used_key(m) for m in models])
    return {m: float(v) for m, v in zip(models, values, strict=True) if v is not None}


@dataclass(frozen=True)
class Wake:
    """What a request for a model with no live engine learns from ``deployment_wake``."""

    deployment: str
    woke: bool  # this call raised it from 0 to 1 (False: it was already on its way)
    failed_reason: str = ""  # every replica it holds failed: waiting is pointless


@transaction.atomic
def deployment_wake(*, model: str) -> Wake | None:
    """Wake the scale-to-zero deployment of served model ``model``: 0 replicas become 1.

    None when ``model`` has no scale-to-zero deployment (the API keeps answering 503). When
    one of them already wants replicas (woken by another request, or loading), nothing is
    written and the caller just waits. The raise is one conditional UPDATE (``replicas = 0``),
    so of many concurrent requests, in one process or many, exactly one wakes it and leaves
    the audit event and the cold-start marker.
    """
    deployments = list(
        Deployment.objects.filter(served_model__name=model, scale_to_zero=True).order_by("name")
    )
    if not deployments:
        return None
    wanted = [d for d in deployments if d.replicas > 0]
    if wanted:
        return Wake(wanted[0].name, woke=False, failed_reason=_all_failed(wanted[0]))
    target = deployments[0]
    woke = bool(
        Deployment.objects.filter(pk=target.pk, replicas=0).update(
            replicas=F("replicas") + 1, updated_at=timezone.now()
        )
    )
    if woke:
        client = sync_redis()
        now = time.time()
        touch_used(client, model, now)
        client.set(wake_key(target.name), repr(now), ex=WAKE_MARKER_TTL_S)
        audit_record(
            actor_label=SYSTEM_ACTOR,
            action="deployment.wake",
            target=target,
            details={"model": model, "replicas": [0, 1]},
        )
    return Wake(target.name, woke=woke)


def _all_failed(deployment: Deployment) -> str:
    """The reason of a failed replica when every replica holding a slot has failed."""
    holding = list(
        deployment.replicas_set.filter(state__in=(*RUNNING_STATES, Replica.State.FAILED))
    )
    if holding and all(r.state == Replica.State.FAILED for r in holding):
        return holding[0].reason or "its replicas failed"
    return ""
