"""Which live engines hold which adapters, from the engines' status records.

The database's ``ready`` means *validated*; an adapter is *serving* once a live engine of its
base model lists it (this version) in its status record (live: the status key has not
expired). The admin reads this; the API reads the same records through its own cached
admission snapshot (inference/transport/engine_capacity.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

import redis
from django.conf import settings

from controlplane.common.engine_statuses import read_engine_statuses
from controlplane.common.redis_clients import sync_redis
from engine import protocol

logger = logging.getLogger(__name__)

# Statuses are read once for a whole admin page, not once per row.
CACHE_S = 1.0

_cache: tuple[float, str, Mapping[str, list[protocol.EngineStatus]]] | None = None


def live_engines_by_model() -> Mapping[str, list[protocol.EngineStatus]]:
    """Status records of the live, non-draining engines, by model; at most CACHE_S old. An
    unreachable Redis reads as no engine at all."""
    global _cache
    prefix = settings.PLATFORM_REDIS_PREFIX
    now = time.monotonic()
    if _cache is not None and _cache[1] == prefix and now - _cache[0] < CACHE_S:
        return _cache[2]
    try:
        statuses = read_engine_statuses(sync_redis(), protocol.Keys(prefix))
    except redis.RedisError as exc:
        logger.warning("engine statuses unreadable: %s", exc)
        statuses = []
    by_model: dict[str, list[protocol.EngineStatus]] = {}
    for status in statuses:
        if not status.draining:
            by_model.setdefault(status.model, []).append(status)
    _cache = (now, prefix, by_model)
    return by_model


def engines_serving(*, model: str, name: str, checksum: str) -> int:
    """How many live engines of ``model`` have loaded adapter ``name`` at ``checksum``."""
    engines = live_engines_by_model().get(model, [])
    return sum(1 for status in engines if status.holds_adapter(name, checksum))


def forget_cached_statuses() -> None:
    global _cache
    _cache = None
