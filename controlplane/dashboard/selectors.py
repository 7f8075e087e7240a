"""Live engines, read from the status records engine processes refresh every second in Redis."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from controlplane.common.redis_clients import redis_key, sync_redis

logger = logging.getLogger(__name__)

# Fields the dashboard shows, with the value used when an engine's record lacks one (engines
# of another version may write fewer or more fields; unknown ones are passed through).
STATUS_DEFAULTS: dict[str, Any] = {
    "engine_id": "",
    "model": "",
    "adapters": [],
    "kv_cache_usage": 0.0,
    "num_running": 0,
    "num_waiting": 0,
    "num_free_blocks": 0,
    "num_total_blocks": 0,
    "tokens_per_s": 0.0,
    "prompt_tokens_total": 0,
    "generation_tokens_total": 0,
    "prefix_cache_queries": 0,
    "prefix_cache_hits": 0,
    "num_preemptions": 0,
    "started_at": None,
    "updated_at": None,
    "draining": False,
}


def _status(raw: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(record, dict):
        return None
    status = {**STATUS_DEFAULTS, **record}
    queries = status.get("prefix_cache_queries") or 0
    status["prefix_cache_hit_rate"] = (
        (status.get("prefix_cache_hits") or 0) / queries if queries else 0.0
    )
    if isinstance(status.get("started_at"), int | float):
        status["uptime_s"] = max(0.0, time.time() - status["started_at"])
    return status


def engine_status_list() -> list[dict[str, Any]]:
    """Every engine whose status record has not expired, sorted by model then engine id."""
    client = sync_redis()
    keys = sorted(client.scan_iter(match=redis_key("status", "*"), count=500))
    if not keys:
        return []
    engines = []
    for key, raw in zip(keys, client.mget(keys), strict=True):
        if raw is None:  # expired between SCAN and MGET
            continue
        status = _status(raw)
        if status is None:
            logger.warning("unreadable engine status at %s", key)
            continue
        engines.append(status)
    return sorted(engines, key=lambda s: (str(s["model"]), str(s["engine_id"])))
