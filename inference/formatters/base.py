"""The interface every OpenAI response shape implements, and the two loops that drive one.

A formatter turns one generation's engine chunks into OpenAI objects: stream events as they
arrive (``stream``), or the whole response at the end (``collect``). Chat and completions share
the choice-shaped loops of ``ChoiceFormatter`` and differ only in the shape of a choice; the
Responses API (formatters/responses.py) streams typed events of its own.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from inference.formatters.prompt_logprobs import prompt_logprobs_entries
from inference.generation.plan import GenerationPlan, GenerationStats
from inference.reasoning.split import split_reasoning
from inference.transport import GenerationChunk, TokenLogprob

# (prompt index, choice index, chunk): what the engine stream yields for every choice.
EngineItem = tuple[int, int, GenerationChunk]


def usage(
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int = 0,
    reasoning_tokens: int | None = None,
    prediction_tokens: tuple[int, int] = (0, 0),
) -> dict[str, Any]:
    """OpenAI's usage object. ``completion_tokens_details`` holds ``reasoning_tokens`` for
    models with a reasoning parser, and ``prediction_tokens``, (accepted, rejected) draft
    tokens of speculative decoding, as OpenAI reports predicted outputs, when there were any."""
    body: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }
    details: dict[str, int] = {}
    if reasoning_tokens is not None:
        details["reasoning_tokens"] = reasoning_tokens
    accepted, rejected = prediction_tokens
    if accepted or rejected:
        details["accepted_prediction_tokens"] = accepted
        details["rejected_prediction_tokens"] = rejected
    if details:
        body["completion_tokens_details"] = details
    return body


@dataclass
class ChoiceOutput:
    """Everything one choice produced, gathered for a whole (non-streamed) response."""

    texts: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    prompt_logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None

    def add(self, chunk: GenerationChunk) -> None:
        self.texts.append(chunk.text)
        if chunk.reasoning:
            self.reasoning.append(chunk.reasoning)
        if chunk.logprobs:
            self.logprobs.extend(chunk.logprobs)
        if chunk.prompt_logprobs:
            self.prompt_logprobs = chunk.prompt_logprobs
        if chunk.finish_reason:
            self.finish_reason, self.stop_reason = chunk.finish_reason, chunk.stop_reason

    @property
    def text(self) -> str:
        return "".join(self.texts)

    @property
    def reasoning_text(self) -> str | None:
        return "".join(self.reasoning) if self.reasoning else None


class ResponseFormatter(ABC):
    """OpenAI objects for one generation: what the use case streams or answers."""

    def __init__(self, plan: GenerationPlan, stats: GenerationStats):
        self.plan = plan
        self.stats = stats

    @abstractmethod
    def stream(self, items: AsyncIterator[EngineItem]) -> AsyncIterator[dict]:
        """The stream's events (observing every chunk into ``self.stats``)."""

    @abstractmethod
    async def collect(self, items: AsyncIterator[EngineItem]) -> dict[str, Any]:
        """The whole response once the generation has finished."""


class EventsFormatter(ResponseFormatter):
    """A shape whose last stream event completes the whole response (``self.final``, set by
    ``stream``): the whole response is the stream, run to its end."""

    final: dict[str, Any] | None = None

    async def collect(self, items: AsyncIterator[EngineItem]) -> dict[str, Any]:
        async for _event in self.stream(items):
            pass
        assert self.final is not None
        return self.final


class ChoiceFormatter(ResponseFormatter):
    """Chat and completions: ``choices`` in every chunk; subclasses build the choices."""

    object_name: str  # of a whole response
    chunk_object_name: str  # of a stream chunk
    echoes_service_tier = False
    # A stream of a request to be stored: the whole response, as the same request unstreamed
    # would have answered, once the stream has ended (see ``keeps_whole``).
    final: dict[str, Any] | None = None

    @property
    def keeps_whole(self) -> bool:
        """Whether a stream also gathers the whole response (``final``): a chat completion
        asked to be stored."""
        return self.plan.chat_store is not None

    def stream(self, items: AsyncIterator[EngineItem]) -> AsyncIterator[dict]:
        return _choice_chunks(self, items)

    async def collect(self, items: AsyncIterator[EngineItem]) -> dict[str, Any]:
        return await _whole_response(self, items)

    def add_prompt_logprobs(
        self, body: dict[str, Any], outputs: list[ChoiceOutput], alternatives: int
    ) -> None:
        """vLLM's ``prompt_logprobs``, at the response's top level: one prompt for all choices
        (chat; completions put each prompt's in its choices)."""
        body["prompt_logprobs"] = prompt_logprobs_entries(outputs[0].prompt_logprobs, alternatives)

    # The shape of a choice -------------------------------------------------------------------

    @abstractmethod
    def opening_choices(self) -> list[dict]:
        """Choices streamed before any engine output (chat's role, completions' echo)."""

    @abstractmethod
    def delta_choice(self, choice: int, chunk: GenerationChunk) -> dict | None:
        """The streamed choice carrying ``chunk``'s new text or logprobs; None if it has none."""

    @abstractmethod
    def finish_choice(self, choice: int, chunk: GenerationChunk) -> dict:
        """The streamed choice that ends ``choice`` with ``chunk.finish_reason``."""

    @abstractmethod
    def whole_choice(self, choice: int, output: ChoiceOutput) -> dict:
        """One choice of the whole response."""

    # Envelopes -------------------------------------------------------------------------------

    def final_usage(self) -> dict[str, Any]:
        stats = self.stats
        reasoning = stats.num_reasoning_tokens if self.plan.reasoning is not None else None
        return usage(
            self.plan.prompt_tokens,
            stats.num_completion_tokens,
            stats.num_cached_tokens,
            reasoning_tokens=reasoning,
            prediction_tokens=stats.prediction_tokens,
        )

    def stream_chunk(self, choices: list[dict], *, final_usage: bool = False) -> dict[str, Any]:
        plan = self.plan
        chunk = {
            "id": plan.request_id,
            "object": self.chunk_object_name,
            "created": plan.created,
            "model": plan.model,
            "choices": choices,
            **self._tier(),
            "system_fingerprint": None,
        }
        if plan.include_usage:
            if final_usage:
                chunk["usage"] = self.final_usage()
            elif plan.continuous_usage and choices:
                chunk["usage"] = self.final_usage()  # so far, cached tokens included
            else:
                chunk["usage"] = None
        return chunk

    def response(self, choices: list[dict]) -> dict[str, Any]:
        plan = self.plan
        return {
            "id": plan.request_id,
            "object": self.object_name,
            "created": plan.created,
            "model": plan.model,
            "choices": choices,
            "usage": self.final_usage(),
            **self._tier(),
            "system_fingerprint": None,
        }

    def _tier(self) -> dict[str, str]:
        # Chat's objects say how the request was processed; legacy completions have no field.
        return {"service_tier": self.plan.service_tier} if self.echoes_service_tier else {}


def stream_events(
    formatter: ResponseFormatter, items: AsyncIterator[EngineItem]
) -> AsyncIterator[dict]:
    """The formatter's stream events for ``items`` (thinking split from answers first)."""
    return formatter.stream(split_reasoning(items, formatter.plan.reasoning))


async def collect_response(
    formatter: ResponseFormatter, items: AsyncIterator[EngineItem]
) -> dict[str, Any]:
    """The formatter's whole response for ``items`` (thinking split from answers first)."""
    return await formatter.collect(split_reasoning(items, formatter.plan.reasoning))


async def _choice_chunks(
    formatter: ChoiceFormatter, items: AsyncIterator[EngineItem]
) -> AsyncIterator[dict]:
    """Stream chunk objects: the opening choices, one chunk per new text or finish, usage."""
    for choice in formatter.opening_choices():
        yield formatter.stream_chunk([choice])
    keeps_whole = formatter.keeps_whole
    outputs = [ChoiceOutput() for _ in range(formatter.plan.num_choices)] if keeps_whole else []
    async for prompt_index, choice, chunk in items:
        formatter.stats.observe(prompt_index, choice, chunk)
        if keeps_whole:
            outputs[choice].add(chunk)
        body = formatter.delta_choice(choice, chunk)
        if body is not None:
            yield formatter.stream_chunk([body])
        if chunk.finish_reason:
            yield formatter.stream_chunk([formatter.finish_choice(choice, chunk)])
    if keeps_whole:
        formatter.final = _whole(formatter, outputs)
    if formatter.plan.include_usage:
        yield formatter.stream_chunk([], final_usage=True)


async def _whole_response(
    formatter: ChoiceFormatter, items: AsyncIterator[EngineItem]
) -> dict[str, Any]:
    """The whole response once every choice has finished."""
    outputs = [ChoiceOutput() for _ in range(formatter.plan.num_choices)]
    async for prompt_index, choice, chunk in items:
        formatter.stats.observe(prompt_index, choice, chunk)
        outputs[choice].add(chunk)
    return _whole(formatter, outputs)


def _whole(formatter: ChoiceFormatter, outputs: list[ChoiceOutput]) -> dict[str, Any]:
    body = formatter.response([formatter.whole_choice(i, o) for i, o in enumerate(outputs)])
    alternatives = formatter.plan.prompt_logprobs_field
    if alternatives is not None:
        formatter.add_prompt_logprobs(body, outputs, alternatives)
    return body
