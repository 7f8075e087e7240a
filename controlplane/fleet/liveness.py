"""Node heartbeats in Redis, and the lock one reconciler pass holds.

A node is live while its heartbeat key exists: its agent sets it with a TTL at every beat
(``node_heartbeat``), so a killed agent's node expires by itself, with no clock shared
between hosts. The database's ``Node.last_heartbeat`` is what the admin shows, not what
placement trusts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import redis
from redis.exceptions import LockError

from controlplane.common.redis_clients import redis_key

T = TypeVar("T")


def node_key(name: str) -> str:
    return redis_key("fleet", "node", name)


def node_beat(client: redis.Redis, name: str, *, ttl_s: float) -> None:
    client.set(node_key(name), "1", px=max(1, int(ttl_s * 1000)))


def node_forget(client: redis.Redis, name: str) -> None:
    client.delete(node_key(name))


def live_node_names(client: redis.Redis) -> set[str]:
    prefix = node_key("")
    found = client.scan_iter(match=prefix + "*", count=500)
    return {key.decode()[len(prefix) :] for key in found}


# How long the reconcile lock outlives a holder that died mid-pass. It bounds how late the
# survivors notice a lost node when the agent killed with it held the lock, so it is kept
# short: a pass is a few queries (well under a second even on a loaded machine), and with 30 s
# a SIGKILLed agent could hold up the replacement of its own replicas by half a minute.
RECONCILE_LOCK_TTL_S = 10.0


def under_fleet_lock(
    client: redis.Redis, work: Callable[[], T], *, ttl_s: float = RECONCILE_LOCK_TTL_S
) -> T | None:
    """``work()`` while holding the fleet's reconcile lock; None, without waiting, when another
    process holds it (its pass does the same work). The lock expires after ``ttl_s`` should
    its holder die mid-pass."""
    lock = client.lock(redis_key("fleet", "reconcile"), timeout=ttl_s, blocking=False)
    if not lock.acquire():
        return None
    try:
        return work()
    finally:
        try:
            lock.release()
        except LockError:  # expired under a slow pass: someone else may hold it now
            pass


def node_is_live(client: redis.Redis, name: str) -> bool:
    return bool(client.exists(node_key(name)))
