"""How every Redis client of the API and control plane connects: quick retries, then an error.

redis-py 8's default retries a failed command ten times with up to ten seconds between tries,
so a request that meets a Redis outage hangs for a minute and then fails with a 500. Here a
stale connection (Redis restarted) is replaced transparently with a few quick retries, and a
Redis that stays away raises ``redis.ConnectionError`` within about a second, which the API
answers with 503 ``service_unavailable`` and Retry-After (inference/errors.py).
"""

from __future__ import annotations

from functools import cache

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

try:
    from redis.driver_info import DriverInfo
except ImportError:  # older redis-py: no per-connection metadata read to avoid
    DriverInfo = None

RETRIES = 2
BACKOFF_BASE_S = 0.05
BACKOFF_CAP_S = 0.2
CONNECT_TIMEOUT_S = 2.0
HEALTH_CHECK_INTERVAL_S = 30


@cache
def _driver_info_option() -> dict:
    """What every connection tells Redis about its client (CLIENT SETINFO), read once. Without
    it redis-py 8 reads its package metadata from disk for each new connection: 7% of the API
    process's CPU while a burst of requests grew its pools (py-spy, 2026-11-26)."""
    return {} if DriverInfo is None else {"driver_info": DriverInfo()}


def _options() -> dict:
    return {
        **_driver_info_option(),
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "socket_keepalive": True,
        # A connection idle this long is PINGed before use: a restarted Redis is noticed
        # before a command is sent on a dead socket.
        "health_check_interval": HEALTH_CHECK_INTERVAL_S,
    }


def sync_options() -> dict:
    """Keyword arguments for ``redis.Redis.from_url`` / ``ConnectionPool.from_url``."""
    backoff = ExponentialBackoff(cap=BACKOFF_CAP_S, base=BACKOFF_BASE_S)
    return {"retry": Retry(backoff, RETRIES), **_options()}


def async_options() -> dict:
    """The same for ``redis.asyncio`` clients and pools."""
    backoff = ExponentialBackoff(cap=BACKOFF_CAP_S, base=BACKOFF_BASE_S)
    return {"retry": AsyncRetry(backoff, RETRIES), **_options()}


def sync_client(url: str, **overrides) -> redis.Redis:
    return redis.Redis.from_url(url, **{**sync_options(), **overrides})


def async_client(url: str, **overrides) -> aioredis.Redis:
    return aioredis.Redis.from_url(url, **{**async_options(), **overrides})


def async_blocking_pool(url: str, *, max_connections: int, timeout: float, **overrides):
    """A pool that makes a burst wait for a free connection instead of raising."""
    return aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=timeout,
        **{**async_options(), **overrides},
    )
