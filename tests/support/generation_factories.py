"""Factories for generation tests: callers, plans, engine chunks and admitted generations."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable

from controlplane.access.admission import admit
from controlplane.access.principals import Principal
from controlplane.access.ratelimit import Limits
from controlplane.usage.events import UsageEvent
from engine.protocol import SamplingOptions
from inference.generation.plan import GenerationPlan, Kind
from inference.generation.use_case import Generation
from inference.transport.output_processor import GenerationChunk, TokenLogprob

MODEL = "tiny"
# The context of MODEL as the generation tests serve it, and an embedding model beside it.
MAX_MODEL_LEN = 64
EMBEDDING_MODEL = "embedder"
# A step of a scripted engine: it goes quiet and never answers again.
HANG = "hang"


def make_principal(
    tenant: str = "acme", *, tenant_id: int = 1, limits: Limits | None = None
) -> Principal:
    """An API key of ``tenant``; unlimited unless ``limits`` are given (no Redis round trip)."""
    return Principal(
        key_id=tenant_id * 10,
        key_prefix=f"sk-{tenant}",
        tenant_id=tenant_id,
        tenant_slug=tenant,
        cache_salt=f"secret-salt-of-{tenant}",
        allowed_models=None,
        limits=limits or Limits(),
    )


def make_plan(
    kind: Kind = "chat",
    *,
    prompts: list[tuple[str, list[int]]] | None = None,
    n: int = 1,
    max_tokens: int = 16,
    **fields,
) -> GenerationPlan:
    """A plan as planning would make it; ``fields`` override any GenerationPlan field."""
    prefix = "chatcmpl" if kind == "chat" else "cmpl"
    values = {
        "kind": kind,
        "model": MODEL,
        "request_id": f"{prefix}-test",
        "prompts": prompts or [("Say hi", [11, 12, 13])],
        "sampling": SamplingOptions(n=n, max_tokens=max_tokens),
        "cache_salt": "salt",
        "tenant": "acme",
        "created": 1_700_000_000,
    }
    values.update(fields)
    return GenerationPlan(**values)


def make_chunk(
    text: str = "",
    *,
    index: int = 0,
    token_ids: list[int] | None = None,
    completion_tokens: int = 1,
    finish_reason: str | None = None,
    stop_reason: int | str | None = None,
    prompt_tokens: int = 3,
    cached_tokens: int = 0,
    logprobs: list[TokenLogprob] | None = None,
    **fields,
) -> GenerationChunk:
    return GenerationChunk(
        index=index,
        text=text,
        token_ids=[100 + completion_tokens] if token_ids is None else token_ids,
        logprobs=logprobs,
        finish_reason=finish_reason,
        stop_reason=stop_reason,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cached_tokens=cached_tokens,
        **fields,
    )


def sample_chunks(
    pieces: Iterable[str],
    *,
    index: int = 0,
    finish_reason: str = "stop",
    stop_reason: int | str | None = None,
    cached_tokens: int = 0,
) -> list[GenerationChunk]:
    """One sample's chunks, one token per piece; the last one finishes the sample."""
    pieces = list(pieces)
    return [
        make_chunk(
            piece,
            index=index,
            completion_tokens=i + 1,
            finish_reason=finish_reason if i == len(pieces) - 1 else None,
            stop_reason=stop_reason if i == len(pieces) - 1 else None,
            cached_tokens=cached_tokens,
        )
        for i, piece in enumerate(pieces)
    ]


async def engine_items(
    *items: tuple[int, int, GenerationChunk],
) -> AsyncIterator[tuple[int, int, GenerationChunk]]:
    """(prompt index, choice index, chunk) as engine_chunks yields them."""
    for item in items:
        yield item


def single_prompt(chunks: Iterable[GenerationChunk]) -> list[tuple[int, int, GenerationChunk]]:
    return [(0, chunk.index, chunk) for chunk in chunks]


async def generation_for(plan, *, principal=None, tokenizer=None) -> Generation:
    """A Generation admitted for ``plan`` (Generation.admit without the model lookup); the
    tokenizer is the engine client's, for detokenizing (a stand-in client needs none)."""
    admission = await admit(
        principal or make_principal(),
        model=plan.model,
        prompt_tokens=plan.prompt_tokens,
        max_tokens=plan.sampling.max_tokens * plan.num_choices,
    )
    return Generation(plan, tokenizer, admission, started=time.monotonic())


def billed(event: UsageEvent) -> tuple[int, int, int, str]:
    """What a usage record bills: (status, prompt, completion tokens, finish_reason)."""
    return event.status, event.prompt_tokens, event.completion_tokens, event.finish_reason
