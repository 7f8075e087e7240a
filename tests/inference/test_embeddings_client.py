"""The API's wait for a pooling engine's reply (inference/transport/embeddings_client.py) over a
real Redis: it lasts as long as it is told to, however long the engine takes within it."""

from __future__ import annotations

import asyncio
import time

import redis

from engine.pooling import messages
from engine.protocol import Keys
from inference.transport.embeddings_client import EmbeddingsClient


async def test_a_reply_slower_than_redis_pys_read_timeout_still_arrives(redis_server):
    """redis-py 8 stops reading a socket after 5 s and retried twice: a BLPOP waiting longer
    than 15 s failed as if Redis were away (503), though the engine was about to answer (a
    big batch on a CPU, a crashed engine's requests taken up by a survivor)."""
    client = EmbeddingsClient(redis_server.url, prefix="llmp", timeout=25)
    engine_side = redis.Redis.from_url(redis_server.url)
    stream = messages.embed_requests_key("slow", Keys("llmp"))

    async def slow_engine():
        while not engine_side.xlen(stream):
            await asyncio.sleep(0.05)
        ((_, fields),) = engine_side.xrange(stream)
        request = messages.decode_request(fields[messages.FIELD])
        await asyncio.sleep(16)  # past three of redis-py's 5 s reads
        reply = messages.EmbedReply(request_id=request.request_id, dimensions=1, num_tokens=1)
        engine_side.rpush(request.reply_key, messages.encode(reply))

    started = time.monotonic()
    engine = asyncio.create_task(slow_engine())
    try:
        reply = await client.embed(model="slow", inputs=[[1]])
    finally:
        await engine
        await client.redis.aclose()
    assert reply.error == "" and 16 <= time.monotonic() - started < 25
