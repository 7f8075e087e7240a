"""The engine side of one generation: one engine request per prompt, their chunks merged.

A completions request with several prompts becomes one engine request per prompt; their
outputs merge into one stream of (prompt index, choice index, chunk) as they arrive. Closing
the stream aborts every engine request behind it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from engine.protocol import AdapterRef
from engine.text.tokenizer import ChatTokenizer
from inference.generation.plan import GenerationPlan
from inference.transport import EngineClient, GenerationChunk


def _adapter_ref(plan: GenerationPlan) -> AdapterRef | None:
    route = plan.adapter
    if route is None:
        return None
    return AdapterRef(name=route.name, checksum=route.checksum, path=route.path)


async def _one_prompt(
    client: EngineClient, plan: GenerationPlan, tokenizer: ChatTokenizer, index: int
) -> AsyncIterator[tuple[int, int, GenerationChunk]]:
    _text, token_ids = plan.prompts[index]
    request_id = plan.request_id if len(plan.prompts) == 1 else f"{plan.request_id}-{index}"
    stream = client.generate(
        model=plan.engine_model or plan.model,
        prompt_token_ids=token_ids,
        sampling=plan.sampling,
        tokenizer=tokenizer,
        request_id=request_id,
        cache_salt=plan.cache_salt,
        tenant=plan.tenant,
        adapter=_adapter_ref(plan),
        stop=plan.stop,
        include_stop_str_in_output=plan.include_stop_str_in_output,
        skip_special_tokens=plan.skip_special_tokens,
        priority=plan.priority,
    )
    try:
        async for chunk in stream:
            yield index, index * plan.n + chunk.index, chunk
    finally:
        await stream.aclose()


async def engine_chunks(
    client: EngineClient, plan: GenerationPlan, tokenizer: ChatTokenizer
) -> AsyncIterator[tuple[int, int, GenerationChunk]]:
    """(prompt index, choice index, GenerationChunk) for every prompt, merged as they arrive."""
    if len(plan.prompts) == 1:
        single = _one_prompt(client, plan, tokenizer, 0)
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
            async for item in _one_prompt(client, plan, tokenizer, index):
                await queue.put(item)
            await queue.put(done)
        except Exception as exc:  # surfaced to the reader, which stops the others
            await queue.put(exc)

    tasks = [asyncio.create_task(pump(i)) for i in range(len(plan.prompts))]
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
