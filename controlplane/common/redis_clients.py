"""Redis clients for the control plane: one sync client per process, one async per event loop."""

from __future__ import annotations

import asyncio
import weakref

import redis
import redis.asyncio as aioredis
from django.conf import settings

from controlplane.common.redis_pools import async_blocking_pool, sync_client

_sync: tuple[str, redis.Redis] | None = None
_async: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def redis_key(*parts: object) -> str:
    """``{PLATFORM_REDIS_PREFIX}:part:part...``: every key the platform writes."""
    return ":".join([settings.PLATFORM_REDIS_PREFIX, *map(str, parts)])


def sync_redis() -> redis.Redis:
    global _sync
    url = settings.REDIS_URL
    if _sync is None or _sync[0] != url:
        _sync = (url, sync_client(url))
    return _sync[1]


def async_redis() -> aioredis.Redis:
    """A client bound to the running loop (a client must not cross event loops).

    Its pool *waits* for a free connection: redis-py's default asyncio pool raises
    MaxConnectionsError past 100 connections, which hundreds of concurrent requests reach.
    """
    loop = asyncio.get_running_loop()
    url = settings.REDIS_URL
    entry = _async.get(loop)
    if entry is None or entry[0] != url:
        pool = async_blocking_pool(
            url,
            max_connections=int(getattr(settings, "REDIS_MAX_CONNECTIONS", 512)),
            timeout=10,
        )
        entry = (url, aioredis.Redis(connection_pool=pool))
        _async[loop] = entry
    return entry[1]
