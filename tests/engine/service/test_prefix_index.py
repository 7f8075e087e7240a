"""The engine's prefix index in Redis follows its cache: additions and evictions are sent as
differences, a lost index (Redis restarted empty) is sent whole again, and it expires."""

from __future__ import annotations

import hashlib
import time

import redis

from engine.direct_routing import PREFIX_INDEX_BYTES
from engine.service.prefix_index import PrefixIndexPublisher


def block_hashes(*names: str) -> list[bytes]:
    return [hashlib.sha256(name.encode()).digest() for name in names]


def test_the_index_follows_the_cache_and_heals_after_a_loss(redis_server):
    client = redis.Redis.from_url(redis_server.url)
    key = f"index{time.monotonic_ns()}"
    cache = set(block_hashes(*(f"b{i}" for i in range(5000))))
    publisher = PrefixIndexPublisher(key, lambda: list(cache), ttl_s=30)

    publisher.publish(client)
    assert client.smembers(key) == {h[:PREFIX_INDEX_BYTES] for h in cache}

    evicted = set(list(cache)[:100])
    cache -= evicted
    cache |= set(block_hashes("new1", "new2"))
    publisher.publish(client)
    assert client.smembers(key) == {h[:PREFIX_INDEX_BYTES] for h in cache}

    client.delete(key)  # as after a Redis restart: the next beat sends it whole
    publisher.publish(client)
    assert client.scard(key) == len(cache)
    assert 0 < client.pttl(key) <= 30_000

    publisher.withdraw(client)
    assert not client.exists(key)
    client.close()
