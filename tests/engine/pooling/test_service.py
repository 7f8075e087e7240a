"""The pooling service over a real Redis: one reply per request, vectors in input order."""

from __future__ import annotations

import threading

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
def service(redis_client, redis_server):
    service = PoolingService(
        _Runner(), model_name="embedder", redis_url=redis_server.url, block_ms=50
    )
    thread = threading.Thread(target=service.run, daemon=True)
    thread.start()
    yield service
    service.stop()
    thread.join(timeout=5)


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
