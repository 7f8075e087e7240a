"""Many streams at once on one Daphne: every one completes with the right token count.

A lighter version of bench/api_concurrency.py (200 streams; figures in docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.slow

NUM_STREAMS = 32
MAX_TOKENS = 8


async def _stream(client, model: str, index: int) -> tuple[int, int, int]:
    stream = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": f"Stream {index}"}],
        max_tokens=MAX_TOKENS,
        temperature=0.7,
        seed=index,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    pieces, finishes, usage = 0, 0, 0
    async for chunk in stream:
        if chunk.usage:
            usage = chunk.usage.completion_tokens
        for choice in chunk.choices:
            pieces += bool(choice.delta.content)
            finishes += choice.finish_reason is not None
    return pieces, finishes, usage


async def test_many_concurrent_streams_all_complete(platform):
    import httpx

    limits = httpx.Limits(max_connections=NUM_STREAMS + 4)
    client = platform.async_sdk(http_client=httpx.AsyncClient(limits=limits, timeout=120))
    results = await asyncio.gather(
        *(_stream(client, platform.chat_model, i) for i in range(NUM_STREAMS))
    )
    await client.close()
    assert all(usage == MAX_TOKENS for _pieces, _finishes, usage in results)
    assert all(finishes == 1 for _pieces, finishes, _usage in results)
    assert all(pieces > 1 for pieces, _finishes, _usage in results)
