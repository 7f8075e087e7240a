"""What the dashboard shows: live engines, read from the status records engine processes
refresh every second in Redis, and tokens per tenant, written or still queued."""

from __future__ import annotations

import logging
import time
from typing import Any

import msgspec
from django.conf import settings

from controlplane.common.engine_statuses import find_engine_statuses
from controlplane.common.redis_clients import sync_redis
from controlplane.usage.selectors import (
    daily_tokens_by_tenant,
    pending_usage_events,
    tokens_per_minute_by_tenant,
)
from engine.protocol import EngineStatus, Keys

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


def tenant_token_charts() -> dict[str, dict]:
    """Tokens per tenant per minute (the last hour) and per day (two weeks), counting the usage
    still queued in Redis: the charts stay current where no Celery beat flushes usage, and
    reading them writes nothing."""
    try:
        pending = pending_usage_events()
    except Exception:  # Redis away: the charts show what the database holds
        logger.warning("queued usage unavailable to the dashboard", exc_info=True)
        pending = []
    return {
        "tokens_per_minute": tokens_per_minute_by_tenant(minutes=60, pending=pending),
        "tokens_per_day": daily_tokens_by_tenant(days=14, pending=pending),
    }
