"""Which Redis errors mean a reader's stream or group is gone (engine/redis_streams.py), as the
engine and pooling readers meet them from a real redis-server."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from engine.redis_streams import ensure_group, stream_gone


def test_a_read_blocked_on_a_deleted_stream_and_a_read_without_its_group(redis_client):
    ensure_group(redis_client, "s", "g")
    failures: list[Exception] = []

    def blocked_read():
        try:
            redis_client.xreadgroup("g", "me", {"s": ">"}, block=3_000)
        except redis.ResponseError as exc:
            failures.append(exc)

    reader = threading.Thread(target=blocked_read)
    reader.start()
    time.sleep(0.3)  # into the blocking read
    redis_client.delete("s")
    reader.join(timeout=5)
    assert failures and stream_gone(failures[0]), failures  # "UNBLOCKED ... no longer exists"

    with pytest.raises(redis.ResponseError) as no_group:
        redis_client.xreadgroup("g", "me", {"s": ">"})
    assert stream_gone(no_group.value)  # NOGROUP
    assert not stream_gone(redis.ResponseError("WRONGTYPE Operation against a key"))
