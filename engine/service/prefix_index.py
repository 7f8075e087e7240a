"""Publishing the engine's prefix cache for the API's router (engine/direct_routing.py).

Every heartbeat the set of cached block hashes is compared with what was last published and
only the difference is sent (SADD, SREM). The set's size comes back in the same round trip:
when it disagrees (Redis restarted empty, or the key expired during a long pause), the whole
set is sent again. The key expires a few status TTLs after the last beat, so a dead engine's
index does not outlive it for long; the router asks only live engines anyway.

The hashes are the engine's own, salted ones: a router can only find a tenant's blocks by
hashing that tenant's prompt under that tenant's salt, so the index reveals nothing across
tenants.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from itertools import islice
from typing import TYPE_CHECKING

import redis

from engine import protocol
from engine.direct_routing import index_member

if TYPE_CHECKING:
    from engine.config import ServiceSettings
    from engine.llm_engine import LLMEngine

logger = logging.getLogger(__name__)

CHUNK = 2000  # members per SADD/SREM: keeps one command's size bounded


class PrefixIndexPublisher:
    def __init__(self, key: str, cached_hashes: Callable[[], Iterable[bytes]], ttl_s: float):
        self.key, self.cached_hashes = key, cached_hashes
        self.ttl_ms = int(ttl_s * 1000)
        self.published: set[bytes] = set()

    @classmethod
    def for_engine(
        cls, engine: LLMEngine, keys: protocol.Keys, settings: ServiceSettings
    ) -> PrefixIndexPublisher | None:
        """The publisher of ``engine``'s prefix cache; None without prefix caching or with
        ``--no-prefix-routing``: then the engine publishes no block size either, and the
        router never picks it for a cached prefix."""
        if not engine.config.enable_prefix_caching or not settings.prefix_routing:
            return None
        pool = engine.scheduler.kv_cache.pool
        key = keys.prefix_index(settings.model_name, settings.engine_id)
        # list() of a dict with bytes keys runs without releasing the GIL: a consistent copy,
        # though the loop thread changes the dict.
        return cls(key, lambda: list(pool.cached_blocks), 4 * settings.status_ttl)

    def publish(self, client: redis.Redis) -> None:
        current = {index_member(h) for h in self.cached_hashes()}
        added, removed = current - self.published, self.published - current
        pipe = client.pipeline(transaction=False)
        for members in _chunks(added):
            pipe.sadd(self.key, *members)
        for members in _chunks(removed):
            pipe.srem(self.key, *members)
        pipe.pexpire(self.key, self.ttl_ms)
        pipe.scard(self.key)
        size = pipe.execute()[-1]
        self.published = current
        if size != len(current):  # lost or stale: send it whole
            pipe = client.pipeline(transaction=True)
            pipe.delete(self.key)
            for members in _chunks(current):
                pipe.sadd(self.key, *members)
            pipe.pexpire(self.key, self.ttl_ms)
            pipe.execute()

    def withdraw(self, client: redis.Redis) -> None:
        client.delete(self.key)
        self.published = set()


def _chunks(members: set[bytes]) -> Iterable[list[bytes]]:
    it = iter(members)
    while chunk := list(islice(it, CHUNK)):
        yield chunk
