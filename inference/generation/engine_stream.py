"""The engine side of one generation: one engine request per prompt, their chunks merged.

A completions request with several prompts becomes one engine request per prompt; their
outputs merge into one stream of (prompt index, choice index, chunk) as they arrive. Closing
the stream aborts every engine request behind it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from engine.text.tokenizer import ChatTokenizer
from inference.generation.plan import GenerationPlan
from inference.transport import EngineClient, EngineRequest, GenerationChunk


async def _one_prompt(
    client: EngineClient, request: EngineRequest, tokenizer: ChatTokenizer, index: int, n: int
) -> AsyncIterator[tuple[int, int, GenerationChunk]]:
    stream = client.generate(request, tokenizer)
    try:
        async for chunk in stream:
            yield index, index * n + chunk.index, chunk
    finally:
        await stream.aclose()


async def engine_chunks(
    client: EngineClient, plan: GenerationPlan, tokenizer: ChatTokenizer
) -> AsyncIterator[tuple[int, int, GenerationChunk]]:
    """(prompt index, choice index, GenerationChunk) for every prompt, merged as they arrive."""
    requests = plan.engine_requests()
    if len(requests) == 1:
        single = _one_prompt(client, requests[0], tokenizer, 0, plan.n)
        try:
            async for item in single:
                yield item
        finally:
            await single.aclose()
        return
    queue: asyncio.Queue = asyncio.Queue()
    done = object()

    async def pump(index: int) -> None:
        try:
            async for item in _one_prompt(client, requests[index], tokenizer, index, plan.n):
                await queue.put(item)
            await queue.put(done)
        except Exception as exc:  # surfaced to the reader, which stops the others
            await queue.put(exc)

    tasks = [asyncio.create_task(pump(i)) for i in range(len(requests))]
    try:
        remaining = len(tasks)
        while remaining:
            item = await queue.get()
            if item is done:
                remaining -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
