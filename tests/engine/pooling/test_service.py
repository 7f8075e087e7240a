"""The pooling service over a real Redis: one reply per request, vectors in input order; the
requests of a pooling engine that died holding them are embedded by a survivor."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from engine.pooling import messages
from engine.pooling.service import PoolingService
from engine.protocol import Keys


class _Runner:
    """A runner that embeds token ids as their first id one-hot (the service is under test)."""

    dimensions = 4

    def embed(self, inputs, token_type_ids=None):
        out = torch.zeros(len(inputs), 4)
        for row, ids in enumerate(inputs):
            out[row, ids[0] % 4] = 1.0
        return out


@pytest.fixture
def start_service(redis_server, redis_client):
    """Starts pooling services on the session's Redis, emptied first (``redis_client``: its
    flush must not come after a service made its group)."""
    started = []

    def start(block_ms: int = 50) -> PoolingService:
        service = PoolingService(
            _Runner(), model_name="embedder", redis_url=redis_server.url, block_ms=block_ms
        )
        thread = threading.Thread(target=service.run, daemon=True)
        thread.start()
        started.append((service, thread))
        return service

    yield start
    for service, thread in started:
        service.stop()
        thread.join(timeout=5)


@pytest.fixture
def service(start_service):
    return start_service()


def _request(redis_client, request_id: str, inputs):
    reply_key = messages.embed_reply_key(request_id)
    request = messages.EmbedRequest(request_id=request_id, reply_key=reply_key, inputs=inputs)
    redis_client.xadd(
        messages.embed_requests_key("embedder"), {messages.FIELD: messages.encode(request)}
    )
    return reply_key


def test_requests_get_their_own_vectors(service, redis_client):
    # A malformed entry first: it is dropped (and acked) without disturbing the others.
    redis_client.xadd(messages.embed_requests_key("embedder"), {messages.FIELD: b"garbage"})
    keys = [_request(redis_client, f"r{i}", [[i], [i + 1, 9]]) for i in range(3)]
    for i, key in enumerate(keys):
        _key, data = redis_client.blpop([key], timeout=10)
        reply = messages.decode_reply(data)
        assert reply.request_id == f"r{i}" and reply.error == "" and reply.dimensions == 4
        vectors = [np.frombuffer(v, dtype="<f4") for v in reply.vectors]
        assert [int(v.argmax()) for v in vectors] == [i % 4, (i + 1) % 4]
        assert reply.num_tokens == 3
        assert redis_client.ttl(key) == -2 or redis_client.ttl(key) <= messages.REPLY_TTL_S
    # Served entries are acknowledged and removed: nothing left pending.
    stream = messages.embed_requests_key("embedder")
    assert redis_client.xpending(stream, messages.POOLING_GROUP)["pending"] == 0
    # The service announces itself like a generation engine, so /ready sees it.
    member = f"embedder:{service.engine_id}"
    assert member.encode() in redis_client.smembers(Keys().engines())
    assert redis_client.exists(Keys().status("embedder", service.engine_id))


STREAM = messages.embed_requests_key("embedder")


def _held_by_dead_engines(redis_client, request_id: str, *engine_ids: str) -> str:
    """A request read by each of ``engine_ids`` in turn (claimed from the one before), all of
    which then died: registered, pending under the last, with no status record."""
    reply_key = _request(redis_client, request_id, [[1]])
    redis_client.xgroup_create(STREAM, messages.POOLING_GROUP, id="0", mkstream=True)
    (entry_id, _fields), *_ = redis_client.xreadgroup(
        messages.POOLING_GROUP, engine_ids[0], {STREAM: ">"}, count=1
    )[0][1]
    for engine_id in engine_ids[1:]:
        redis_client.xclaim(STREAM, messages.POOLING_GROUP, engine_id, 0, [entry_id])
    for engine_id in engine_ids:
        redis_client.sadd(Keys().engines(), f"embedder:{engine_id}")
    return reply_key


def _consumers(redis_client) -> set[str]:
    return {
        c["name"].decode() for c in redis_client.xinfo_consumers(STREAM, messages.POOLING_GROUP)
    }


def test_a_dead_engines_request_is_embedded_by_a_survivor(start_service, redis_client):
    reply_key = _held_by_dead_engines(redis_client, "r-held", "dead-pooler")
    service = start_service()
    _key, data = redis_client.blpop([reply_key], timeout=15)
    reply = messages.decode_reply(data)
    assert reply.error == "" and len(reply.vectors) == 1
    assert redis_client.xpending(STREAM, messages.POOLING_GROUP)["pending"] == 0
    # The dead engine is gone from the group and the registry; the survivor is in both.
    assert _consumers(redis_client) == {service.engine_id}
    assert redis_client.smembers(Keys().engines()) == {f"embedder:{service.engine_id}".encode()}


def test_a_request_two_engines_died_holding_gets_an_error_not_a_third_try(
    start_service, redis_client
):
    reply_key = _held_by_dead_engines(redis_client, "r-poison", "dead-a", "dead-b")
    start_service()
    _key, data = redis_client.blpop([reply_key], timeout=15)
    reply = messages.decode_reply(data)
    assert reply.vectors == [] and "2 engines serving 'embedder' stopped" in reply.error
    assert redis_client.xlen(STREAM) == 0  # answered, acknowledged and deleted


def test_a_live_engines_pending_request_is_left_to_it(start_service, redis_client):
    reply_key = _held_by_dead_engines(redis_client, "r-busy", "busy-pooler")
    status = Keys().status("embedder", "busy-pooler")
    redis_client.set(status, b"x", ex=60)  # its status record: alive, just slow
    start_service()
    # Long enough for the survivor's grace (2.5 s) and a few checks after it.
    assert redis_client.blpop([reply_key], timeout=4) is None
    assert redis_client.xpending(STREAM, messages.POOLING_GROUP)["pending"] == 1


def test_a_stopped_engine_leaves_the_group_and_the_registry(start_service, redis_client):
    service = start_service()
    reply_key = _request(redis_client, "r-last", [[2]])
    assert redis_client.blpop([reply_key], timeout=10) is not None
    service.stop()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (
        redis_client.smembers(Keys().engines()) or _consumers(redis_client)
    ):
        time.sleep(0.05)
    # Nothing left for a survivor to find: no stale consumer, no registered engine.
    assert redis_client.smembers(Keys().engines()) == set()
    assert _consumers(redis_client) == set()


def test_a_stream_deleted_under_a_blocked_read_is_made_again_and_served(
    start_service, redis_client
):
    # Redis 7 wakes a read blocked on a deleted stream with "UNBLOCKED the stream key no longer
    # exists", not NOGROUP; the loop died of it while its status thread went on saying it was
    # alive (a flush of the wrong database, a key deleted by hand).
    service = start_service(block_ms=3_000)
    deadline = time.monotonic() + 10
    while not redis_client.exists(Keys().status(service.model_name, service.engine_id)):
        assert time.monotonic() < deadline, "the service never said it was up"
        time.sleep(0.05)
    time.sleep(0.3)  # into its blocking read
    redis_client.delete(messages.embed_requests_key("embedder"))
    reply_key = _request(redis_client, "after-delete", [[2]])
    _key, data = redis_client.blpop([reply_key], timeout=15)
    reply = messages.decode_reply(data)
    assert reply.error == "" and len(reply.vectors) == 1
    assert int(np.frombuffer(reply.vectors[0], dtype="<f4").argmax()) == 2
