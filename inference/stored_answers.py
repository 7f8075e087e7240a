"""A generation's answer, whole or as stream events, kept on the way when the request asked:
a Responses one unless ``store: false``, a chat completion with ``store: true``.

A stored answer is kept before the client's stream ends (the Responses API's final event,
chat's ``data: [DONE]``), so a GET right after the stream finds it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from inference.chat_store.storage import store_completion
from inference.generation.plan import GenerationPlan
from inference.generation.use_case import Generation
from inference.responses.storage import store_response

# The Responses events that carry the finished response (stored before they are sent).
FINAL_EVENTS = ("response.completed", "response.incomplete")


def _stores(plan: GenerationPlan) -> bool:
    return plan.kind == "response" or plan.chat_store is not None


async def _store(plan: GenerationPlan, answer: dict[str, Any]) -> None:
    if plan.kind == "response":
        await store_response(plan.response, answer)  # unless store: false
    elif plan.chat_store is not None:
        await store_completion(plan.chat_store, answer)


class StoredEvents:
    """A generation's events, its answer stored before the last one goes out: the Responses
    API's final event carries it; a chat stream's is whole when its chunks end. Closing
    passes through, so the generation settles however the stream ends (GenerationEvents)."""

    def __init__(self, generation: Generation):
        self._events = generation.events()
        self._plan = generation.plan
        self._formatter = generation.formatter

    def __aiter__(self) -> StoredEvents:
        return self

    async def __anext__(self) -> dict[str, Any]:
        try:
            event = await self._events.__anext__()
        except StopAsyncIteration:
            if self._plan.kind == "chat":
                await self._keep(self._formatter.final)
            raise
        if event.get("type") in FINAL_EVENTS:
            await self._keep(event["response"])
        return event

    async def _keep(self, answer: dict[str, Any] | None) -> None:
        try:
            if answer is None:
                raise RuntimeError("the stream ended without its whole answer")
            await _store(self._plan, answer)
        except BaseException:
            await self._events.aclose()  # settles the generation now, not at GC
            raise

    async def aclose(self) -> None:
        await self._events.aclose()

    def close(self) -> None:
        self._events.close()


def generation_events(generation: Generation) -> AsyncIterator[dict[str, Any]]:
    """What a client streams of ``generation``, its answer stored if the request asked."""
    if _stores(generation.plan):
        return StoredEvents(generation)
    return generation.events()


async def whole_answer(generation: Generation) -> dict[str, Any]:
    """The whole answer, stored if the request asked."""
    answer = await generation.response()
    if _stores(generation.plan):
        await _store(generation.plan, answer)
    return answer
