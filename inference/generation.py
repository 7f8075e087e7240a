"""One generation request through the engine, as OpenAI chunks (streams) or one response.

The same chunk objects feed SSE (views) and the WebSocket (consumer). A request with several
prompts (completions) or samples (``n``) becomes one engine request per prompt; their outputs
merge into one stream of choices. Closing the stream aborts every engine request behind it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.text.tokenizer import ChatTokenizer
from inference import responses


@dataclass
class GenerationPlan:
    """Everything decided before the engine sees the request."""

    kind: Literal["chat", "completion"]
    model: str
    request_id: str
    prompts: list[tuple[str, list[int]]]
    sampling: Any  # engine.protocol.SamplingOptions
    n: int
    stop: list[str]
    cache_salt: str
    tenant: str
    # The base model whose engines run the request ("" : ``model`` itself) and, for a LoRA
    # adapter, its route (name, checksum, path: controlplane.adapters.selectors.AdapterRoute).
    engine_model: str = ""
    adapter: Any = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    priority: int = 0
    logprobs: bool = False
    echo: bool = False
    include_usage: bool = False
    continuous_usage: bool = False
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def num_choices(self) -> int:
        return len(self.prompts) * self.n

    @property
    def prompt_tokens(self) -> int:
        return sum(len(ids) for _text, ids in self.prompts)


@dataclass
class GenerationStats:
    """What ``inference.access.finish`` records once the request ends."""

    started: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    completion_tokens: dict[int, int] = field(default_factory=dict)
    cached_tokens: dict[int, int] = field(default_factory=dict)
    finish_reason: str | None = None
    # Gaps between consecutive token arrivals of each choice (vllm:inter_token_latency_seconds).
    inter_token_latencies: list[float] = field(default_factory=list)
    last_token_at: dict[int, float] = field(default_factory=dict)
    # Engine-side intervals (the engine's own clock); None until the engine reports them.
    queue_time: float | None = None
    prefill_time: float | None = None
    decode_time: float | None = None

    def observe(self, prompt_index: int, choice: int, chunk) -> None:
        if chunk.token_ids:
            now = time.monotonic()
            if self.first_token_at is None:
                self.first_token_at = now
            last = self.last_token_at.get(choice)
            if last is not None:
                self.inter_token_latencies.append(now - last)
            self.last_token_at[choice] = now
        self.completion_tokens[choice] = chunk.completion_tokens
        self.cached_tokens[prompt_index] = max(
            self.cached_tokens.get(prompt_index, 0), chunk.cached_tokens or 0
        )
        if chunk.finish_reason:
            self.finish_reason = chunk.finish_reason
        # One request's intervals: the longest over its samples and prompts.
        for name in ("queue_time", "prefill_time", "decode_time"):
            value = getattr(chunk, name, None)
            if value is not None and value >= (getattr(self, name) or 0.0):
                setattr(self, name, value)

    @property
    def num_completion_tokens(self) -> int:
        return sum(self.completion_tokens.values())

    @property
    def num_cached_tokens(self) -> int:
        return sum(self.cached_tokens.values())

    @property
    def time_to_first_token(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.started


async def _one_prompt(client, plan: GenerationPlan, tokenizer: ChatTokenizer, index: int):
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
        adapter=plan.adapter,
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
    client, plan: GenerationPlan, tokenizer: ChatTokenizer
) -> AsyncIterator[tuple[int, int, Any]]:
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


async def stream_chunks(
    chunks: AsyncIterator[tuple[int, int, Any]], plan: GenerationPlan, stats: GenerationStats
) -> AsyncIterator[dict]:
    """OpenAI stream chunk objects for ``plan`` from the merged engine chunks."""
    make = responses.chat_chunk if plan.kind == "chat" else responses.completion_chunk
    with_usage = plan.include_usage

    def envelope(choices: list[dict], usage=None) -> dict:
        if plan.continuous_usage and with_usage and choices:
            usage = responses.usage(plan.prompt_tokens, stats.num_completion_tokens)
        return make(
            request_id=plan.request_id,
            created=plan.created,
            model=plan.model,
            choices=choices,
            usage=usage,
            with_usage=with_usage,
        )

    text_offsets = [0] * plan.num_choices
    if plan.kind == "chat":
        for choice in range(plan.num_choices):
            delta = {"role": "assistant", "content": ""}
            yield envelope([responses.chat_chunk_choice(index=choice, delta=delta)])
    elif plan.echo:
        for choice in range(plan.num_choices):
            text = plan.prompts[choice // plan.n][0]
            text_offsets[choice] = len(text)
            yield envelope(
                [
                    responses.completion_choice(
                        index=choice, text=text, logprobs=None, finish_reason=None, stop_reason=None
                    )
                ]
            )
    async for prompt_index, choice, chunk in chunks:
        stats.observe(prompt_index, choice, chunk)
        if chunk.text or (plan.logprobs and chunk.logprobs):
            if plan.kind == "chat":
                logprobs = (
                    responses.chat_logprobs(chunk.logprobs)
                    if plan.logprobs and chunk.logprobs
                    else None
                )
                body = responses.chat_chunk_choice(
                    index=choice, delta={"content": chunk.text}, logprobs=logprobs
                )
            else:
                logprobs = None
                if plan.logprobs and chunk.logprobs:
                    logprobs = responses.completion_logprobs(
                        chunk.logprobs, text_offset=text_offsets[choice]
                    )
                text_offsets[choice] += len(chunk.text)
                body = responses.completion_choice(
                    index=choice,
                    text=chunk.text,
                    logprobs=logprobs,
                    finish_reason=None,
                    stop_reason=None,
                )
            yield envelope([body])
        if chunk.finish_reason:
            if plan.kind == "chat":
                body = responses.chat_chunk_choice(
                    index=choice,
                    delta={},
                    finish_reason=chunk.finish_reason,
                    stop_reason=chunk.stop_reason,
                )
            else:
                body = responses.completion_choice(
                    index=choice,
                    text="",
                    logprobs=None,
                    finish_reason=chunk.finish_reason,
                    stop_reason=chunk.stop_reason,
                )
            yield envelope([body])
    if with_usage:
        yield make(
            request_id=plan.request_id,
            created=plan.created,
            model=plan.model,
            choices=[],
            usage=responses.usage(
                plan.prompt_tokens, stats.num_completion_tokens, stats.num_cached_tokens
            ),
            with_usage=True,
        )


async def collect_response(
    chunks: AsyncIterator[tuple[int, int, Any]], plan: GenerationPlan, stats: GenerationStats
) -> dict:
    """The whole non-streaming response once every choice has finished."""
    texts = [[] for _ in range(plan.num_choices)]
    logprobs = [[] for _ in range(plan.num_choices)]
    finish: list[tuple[str | None, Any]] = [(None, None)] * plan.num_choices
    async for prompt_index, choice, chunk in chunks:
        stats.observe(prompt_index, choice, chunk)
        texts[choice].append(chunk.text)
        if chunk.logprobs:
            logprobs[choice].extend(chunk.logprobs)
        if chunk.finish_reason:
            finish[choice] = (chunk.finish_reason, chunk.stop_reason)
    choices = []
    for choice in range(plan.num_choices):
        text = "".join(texts[choice])
        reason, stop_reason = finish[choice]
        if plan.kind == "chat":
            lp = responses.chat_logprobs(logprobs[choice]) if plan.logprobs else None
            choices.append(
                responses.chat_choice(
                    index=choice,
                    text=text,
                    logprobs=lp,
                    finish_reason=reason,
                    stop_reason=stop_reason,
                )
            )
        else:
            prefix = plan.prompts[choice // plan.n][0] if plan.echo else ""
            lp = (
                responses.completion_logprobs(logprobs[choice], text_offset=len(prefix))
                if plan.logprobs
                else None
            )
            choices.append(
                responses.completion_choice(
                    index=choice,
                    text=prefix + text,
                    logprobs=lp,
                    finish_reason=reason,
                    stop_reason=stop_reason,
                )
            )
    return responses.completion_object(
        kind=plan.kind,
        request_id=plan.request_id,
        created=plan.created,
        model=plan.model,
        choices=choices,
        usage=responses.usage(
            plan.prompt_tokens, stats.num_completion_tokens, stats.num_cached_tokens
        ),
    )
