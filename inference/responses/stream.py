"""A Responses generation's answer, whole or as stream events, with the finished response
stored on the way (unless the request said ``store: false``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from inference.generation.use_case import Generation
from inference.responses.storage import store_response

# The events that carry the finished response (stored before they are sent).
FINAL_EVENTS = ("response.completed", "response.incomplete")


class StoredEvents:
    """A Responses generation's events; the finished response is stored before its final
    event goes out, so a GET right after the stream finds it. Closing passes through, so the
    generation settles however the stream ends (see GenerationEvents)."""

    def __init__(self, generation: Generation):
        self._events = generation.events()
        self._context = generation.plan.response

    def __aiter__(self) -> StoredEvents:
        return self

    async def __anext__(self) -> dict[str, Any]:
        event = await self._events.__anext__()
        if event["type"] in FINAL_EVENTS:
            try:
                await store_response(self._context, event["response"])
            except BaseException:
                await self._events.aclose()  # settles the generation now, not at GC
                raise
        return event

    async def aclose(self) -> None:
        await self._events.aclose()

    def close(self) -> None:
        self._events.close()


def generation_events(generation: Generation) -> AsyncIterator[dict[str, Any]]:
    """What a client streams of ``generation``: a Responses one stores its final response."""
    if generation.plan.kind == "response":
        return StoredEvents(generation)
    return generation.events()


async def create_response(generation: Generation) -> dict[str, Any]:
    """The whole response, stored unless the request said ``store: false``."""
    response = await generation.response()
    await store_response(generation.plan.response, response)
    return response
