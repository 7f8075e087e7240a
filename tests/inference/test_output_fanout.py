"""The reader of a frontend's output stream (inference/transport/output_fanout.py) against a
real Redis: every delta reaches its request's queue, and what was read leaves the stream,
whether the reader keeps busy or catches up."""

from __future__ import annotations

import asyncio
import time

import redis.asyncio as aioredis

from engine import protocol
from engine.protocol import FIELD, Keys
from inference.transport.output_fanout import READ_BLOCK_MS, TRIM_EVERY, OutputFanOut


def _batch(request_id: str, token: int) -> dict:
    delta = protocol.RequestDelta(request_id=request_id, new_token_ids=[token])
    return {FIELD: protocol.encode(protocol.OutputBatch(engine_id="e1", deltas=[delta]))}


async def test_a_busy_reader_trims_as_it_goes_and_an_idle_one_trims_the_rest(redis_server):
    keys = Keys(f"fan{time.monotonic_ns()}")
    commands = aioredis.Redis.from_url(redis_server.url)
    fanout = OutputFanOut(redis_server.url, commands, keys, "fe")
    stream, queue = keys.outputs("fe"), asyncio.Queue()
    fanout.route("r1", queue)
    sent = 3 * TRIM_EVERY
    try:
        # One entry every few milliseconds: the reader never waits a whole READ_BLOCK_MS, so
        # only trimming every TRIM_EVERY entries keeps the stream short meanwhile.
        longest = 0
        for token in range(sent):
            await commands.xadd(stream, _batch("r1", token))
            longest = max(longest, await commands.xlen(stream))
            await asyncio.sleep(0.003)
        assert longest < 2 * TRIM_EVERY
        got = [(await asyncio.wait_for(queue.get(), 5)).new_token_ids[0] for _ in range(sent)]
        assert got == list(range(sent))  # every delta, in order, once

        deadline = time.monotonic() + 3 * READ_BLOCK_MS / 1000
        while await commands.xlen(stream) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert await commands.xlen(stream) == 0  # caught up: the rest trimmed too
    finally:
        await fanout.close()
        await commands.aclose()
