"""/v1/responses: create (JSON or typed SSE events), retrieve, delete, list input items."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema

from controlplane.responses.background import background_cancel
from controlplane.responses.services import RUNNING
from inference.errors import error_from_exception, invalid_request
from inference.generation.use_case import Generation
from inference.responses import objects, schema
from inference.responses.background import cancel_here, start_background
from inference.responses.event_log import follow, log_exists
from inference.responses.planning import count_input_tokens, prepare_response
from inference.responses.serializers import ResponsesRequestSerializer
from inference.responses.storage import delete_response, stored_response
from inference.sse import TypedEventsBody
from inference.stored_answers import StoredEvents, whole_answer
from inference.views.base import AsyncApiView, event_stream, json_response
from inference.views.list_params import item_page, page_params


class ResponsesView(AsyncApiView):
    """Create a model response: text or message input, instructions, tools, text.format."""

    endpoint = "responses"

    @extend_schema(
        operation_id="createResponse",
        request=ResponsesRequestSerializer,
        responses={200: schema.CREATED},
        tags=["OpenAI"],
    )
    async def post(self, request):
        principal = await self.authenticate()
        generation = await Generation.admit(
            prepare_response, principal, self.json_body(), started=self.started
        )
        self.response_headers = generation.headers  # on errors from here on too
        if generation.plan.response.background:
            queued = await start_background(generation)
            if not generation.plan.stream:
                return json_response(queued)
            return _background_events(principal, queued["id"], after=-1)
        await generation.open()
        if not generation.plan.stream:
            return json_response(await whole_answer(generation))
        formatter = generation.formatter
        return event_stream(
            TypedEventsBody(
                StoredEvents(generation),
                on_error=lambda exc: formatter.error_event(error_from_exception(exc).body()),
            )
        )


class ResponseInputTokensView(AsyncApiView):
    """How many input tokens a Responses request comes to, without running it."""

    endpoint = "responses"

    @extend_schema(
        operation_id="countResponseInputTokens",
        request=ResponsesRequestSerializer,
        responses={200: OpenApiResponse(description='{"object": "response.input_tokens", ...}')},
        tags=["OpenAI"],
    )
    async def post(self, request):
        principal = await self.authenticate()
        count = await count_input_tokens(principal, self.json_body())
        return json_response({"object": "response.input_tokens", "input_tokens": count})


def _background_events(principal, response_id: str, *, after: int):
    """A background response's events numbered above ``after``, as they come (event_log)."""

    async def still_running() -> bool:
        return (await stored_response(principal, response_id)).status in RUNNING

    return event_stream(
        TypedEventsBody(
            follow(response_id, after=after, still_running=still_running),
            on_error=lambda exc: {"type": "error", **error_from_exception(exc).body()["error"]},
        )
    )


def _stream_params(query) -> tuple[bool, int]:
    """``stream`` and ``starting_after`` (-1: from the first event) of a GET."""
    stream = query.get("stream", "false").lower()
    if stream not in ("true", "false"):
        raise invalid_request("stream must be true or false.", param="stream")
    raw = query.get("starting_after", "")
    if raw and not (raw.isascii() and raw.isdigit()):
        raise invalid_request(
            "starting_after must be an event's sequence_number (an integer from 0).",
            param="starting_after",
        )
    return stream == "true", int(raw) if raw else -1


class ResponseDetailView(AsyncApiView):
    """A stored response of the caller's tenant (404 for any other id); with ``stream=true``,
    a background response's events again, after ``starting_after``."""

    endpoint = "responses"

    @extend_schema(
        operation_id="getResponse",
        parameters=[
            OpenApiParameter(
                "stream",
                bool,
                description="Stream the events of a response created with background and "
                "stream, as they come (kept an hour after it ends).",
            ),
            OpenApiParameter(
                "starting_after", int, description="Only the events after this sequence_number."
            ),
        ],
        responses={200: schema.FOUND},
        tags=["OpenAI"],
    )
    async def get(self, request, response_id: str):
        principal = await self.authenticate()
        stream, after = _stream_params(request.GET)
        stored = await stored_response(principal, response_id)
        if not stream:
            return json_response(stored.response)
        if not (stored.background and await log_exists(response_id)):
            raise invalid_request(
                "Only a response created with background and stream can be streamed again, "
                "for an hour after it ends; read this one whole (without stream).",
                param="stream",
            )
        return _background_events(principal, response_id, after=after)

    @extend_schema(
        operation_id="deleteResponse",
        responses={200: schema.GONE},
        tags=["OpenAI"],
    )
    async def delete(self, request, response_id: str):
        principal = await self.authenticate()
        await delete_response(principal, response_id)
        return json_response(objects.deleted(response_id))


class ResponseCancelView(AsyncApiView):
    """Cancel a background response still running (a 400 for any other)."""

    endpoint = "responses"

    @extend_schema(
        operation_id="cancelResponse", request=None, responses={200: schema.FOUND}, tags=["OpenAI"]
    )
    async def post(self, request, response_id: str):
        principal = await self.authenticate()
        cancelled = await sync_to_async(background_cancel)(
            tenant_id=principal.tenant_id, response_id=response_id
        )
        cancel_here(response_id)
        return json_response(cancelled.response)


class ResponseInputItemsView(AsyncApiView):
    """The input items a stored response answered (its whole conversation)."""

    endpoint = "responses"

    @extend_schema(
        operation_id="listInputItems",
        parameters=[
            OpenApiParameter("order", str, enum=["asc", "desc"], description="default desc"),
            OpenApiParameter("after", str, description="an item id: list the items after it"),
            OpenApiParameter("limit", int, description="1 to 100, default 20"),
        ],
        responses={200: schema.ITEMS},
        tags=["OpenAI"],
    )
    async def get(self, request, response_id: str):
        principal = await self.authenticate()
        after, limit, ascending = page_params(request.GET, default_limit=20)
        stored = await stored_response(principal, response_id)
        page = item_page(stored.input_items, after=after, limit=limit, ascending=ascending)
        return json_response(page)
