"""What the dashboard shows: live engines, read from the status records engine processes
refresh every second in Redis, and tokens per tenant, written or still queued."""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any

import msgspec
from django.conf import settings

from controlplane.billing.money import currency
from controlplane.common.engine_statuses import find_engine_statuses
from controlplane.common.redis_clients import sync_redis
from controlplane.deployments.models import ServedModel
from controlplane.fleet.models import Deployment, Replica
from controlplane.fleet.selectors import replica_state_counts
from controlplane.tenants.models import Tenant
from controlplane.usage.selectors import (
    daily_tokens_by_tenant,
    pending_usage_events,
    tokens_per_minute_by_tenant,
)
from controlplane.usage.spend import daily_cost_by_tenant, month_spend_by_tenant
from engine.protocol import EngineStatus, Keys
from engine.redis_outage import TRANSPORT_ERRORS, warn_failure

logger = logging.getLogger(__name__)


def _row(status: EngineStatus) -> dict[str, Any]:
    """What the dashboard shows of one engine: its record, its prefix-cache hit rate and, when
    its start is known, its uptime."""
    row = msgspec.to_builtins(status)
    queries = status.prefix_cache_queries
    row["prefix_cache_hit_rate"] = status.prefix_cache_hits / queries if queries else 0.0
    if status.started_at:
        row["uptime_s"] = max(0.0, time.time() - status.started_at)
    return row


def engine_status_list() -> list[dict[str, Any]]:
    """Every engine whose status record has not expired, sorted by model then engine id.

    Records are found by their keys, so an engine shows here whether or not it registered; an
    engine of another version that writes fewer fields gets the defaults, and a garbled record
    is skipped (controlplane/common/engine_statuses.py)."""
    statuses = find_engine_statuses(sync_redis(), Keys(settings.PLATFORM_REDIS_PREFIX))
    return sorted(map(_row, statuses), key=lambda s: (s["model"], s["engine_id"]))


def live_engines() -> tuple[list[dict[str, Any]] | None, str | None]:
    """(engine_status_list(), None), or (None, why) while Redis cannot be read: the page
    then says the engines are unknown rather than that none is live."""
    try:
        return engine_status_list(), None
    except TRANSPORT_ERRORS as exc:
        warn_failure(logger, exc, "engine statuses unavailable to the dashboard")
        return None, f"Redis cannot be read ({exc}): live engines and queued usage are unknown."


def tenant_token_charts() -> dict[str, dict]:
    """Tokens per tenant per minute (the last hour) and per day (two weeks), counting the usage
    still queued in Redis: the charts stay current where no Celery beat flushes usage, and
    reading them writes nothing."""
    try:
        pending = pending_usage_events()
    except Exception as exc:  # Redis away: the charts show what the database holds
        warn_failure(logger, exc, "queued usage unavailable to the dashboard")
        pending = []
    return {
        "tokens_per_minute": tokens_per_minute_by_tenant(minutes=60, pending=pending),
        "tokens_per_day": daily_tokens_by_tenant(days=14, pending=pending),
    }


def tenant_spend() -> dict:
    """Spend per tenant: per day (two weeks) and this month beside each budget, from the
    usage the flush has written and priced."""
    return {
        "currency": currency(),
        "per_day": daily_cost_by_tenant(days=14),
        "this_month": month_spend_by_tenant(),
    }


def engine_replicas() -> dict[str, tuple[str, str]]:
    """engine id -> (deployment, node) for the fleet's replicas: the names an operator knows
    an engine by, where the engine id is a host-pid-random string."""
    rows = Replica.objects.exclude(engine_id="").values_list(
        "engine_id", "deployment__name", "node__name"
    )
    return {engine_id: (deployment, node or "") for engine_id, deployment, node in rows}


_COMING_UP = {Replica.State.PENDING, Replica.State.STARTING, Replica.State.LOADING}


def _model_state(model: ServedModel, engines: int | None, replicas: Counter, scales_to_zero: bool):
    if model.state == ServedModel.State.REGISTERING:
        return "registering", model.stage or "queued"
    if model.state == ServedModel.State.FAILED:
        return "failed", "registration failed: " + model.failure_reason[:160]
    if not model.is_active:
        return "inactive", "deactivated in the admin"
    if engines is None:
        return "unknown", "Redis cannot be read: whether an engine serves it is unknown"
    if engines:
        return "serving", f"{engines} engine{'s' if engines > 1 else ''} live"
    coming = sum(replicas[state] for state in _COMING_UP)
    if coming:
        return "starting", f"{coming} replica{'s' if coming > 1 else ''} starting"
    if replicas[Replica.State.FAILED]:
        return "failed", f"{replicas[Replica.State.FAILED]} replica(s) failed: see Deployments"
    if scales_to_zero:
        return "scaled to zero", "loads on the first request"
    return "no engine", "nothing serves it: deploy it, or start an engine"


def served_model_states(engines: list[dict[str, Any]] | None) -> list[dict[str, str]]:
    """Every registered model with what serves it, in name order: live engines, replicas
    coming up, scaled to zero, failed, or no engine at all (so a model nobody can call shows).
    ``engines`` None: Redis cannot be read, so what serves an active model is unknown."""
    live = Counter(engine["model"] for engine in engines or [])
    replicas: dict[str, Counter] = {}
    for _deployment, model, state, count in replica_state_counts():
        replicas.setdefault(model, Counter())[state] += count
    zero = set(
        Deployment.objects.filter(scale_to_zero=True).values_list("served_model__name", flat=True)
    )
    rows = []
    for model in ServedModel.objects.order_by("name"):
        engines_of = None if engines is None else live[model.name]
        state, detail = _model_state(
            model, engines_of, replicas.get(model.name, Counter()), model.name in zero
        )
        kind = "embeddings" if model.is_embedding else "chat"
        rows.append({"model": model.name, "kind": kind, "state": state, "detail": detail})
    return rows


def tenant_names_by_slug() -> dict[str, str]:
    return dict(Tenant.objects.values_list("slug", "name"))
