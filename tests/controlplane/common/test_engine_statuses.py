"""The one reader of engine status records: registered or found by key, expired and garbled
records left out."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from controlplane.common.engine_statuses import (
    any_engine_live,
    aread_engine_statuses,
    find_engine_statuses,
    read_engine_statuses,
)
from engine import protocol
from engine.protocol import EngineStatus, Keys

KEYS = Keys("status-test")


def _publish(client, model, engine_id, *, register=True, draining=False, raw=None):
    data = raw or protocol.encode_status(
        EngineStatus(engine_id=engine_id, model=model, draining=draining)
    )
    client.set(KEYS.status(model, engine_id), data, ex=5)
    if register:
        client.sadd(KEYS.engines(), protocol.engine_member(model, engine_id))


def test_registered_engines_leave_out_expired_and_garbled_records(redis_client):
    _publish(redis_client, "tiny", "e1")
    _publish(redis_client, "other", "e2")
    _publish(redis_client, "tiny", "bad", raw=b"{not json")
    redis_client.sadd(KEYS.engines(), protocol.engine_member("tiny", "gone"))  # key expired
    _publish(redis_client, "tiny", "loose", register=False)  # not in the engines set

    assert [s.engine_id for s in read_engine_statuses(redis_client, KEYS)] == ["e2", "e1"]
    assert [s.engine_id for s in read_engine_statuses(redis_client, KEYS, model="tiny")] == ["e1"]


def test_the_async_reader_reads_the_same(redis_client, redis_server):
    _publish(redis_client, "tiny", "e1")
    _publish(redis_client, "tiny", "bad", raw=b"{not json")

    async def read():
        client = aioredis.Redis.from_url(redis_server.url)
        try:
            return await aread_engine_statuses(client, KEYS, model="tiny")
        finally:
            await client.aclose()

    assert [s.engine_id for s in asyncio.run(read())] == ["e1"]


def test_records_found_by_key_need_no_registration(redis_client):
    _publish(redis_client, "tiny", "loose", register=False)
    _publish(redis_client, "tiny", "draining", draining=True)
    _publish(redis_client, "other", "e2")
    _publish(redis_client, "tiny", "bad", raw=b"{not json")

    found = find_engine_statuses(redis_client, KEYS, model="tiny")
    assert [s.engine_id for s in found] == ["draining", "loose"]
    one = find_engine_statuses(redis_client, KEYS, model="tiny", engine_id="loose")
    assert [s.engine_id for s in one] == ["loose"]
    assert len(find_engine_statuses(redis_client, KEYS)) == 3


def test_any_engine_live_counts_draining_engines_unless_told_not(redis_client):
    assert not any_engine_live(redis_client, KEYS, model="tiny")
    _publish(redis_client, "tiny", "draining", draining=True)
    assert any_engine_live(redis_client, KEYS, model="tiny")
    assert not any_engine_live(redis_client, KEYS, model="tiny", include_draining=False)
