"""/v1/responses: create (JSON or typed SSE events), retrieve, delete, list input items."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema

from inference.errors import error_from_exception, invalid_request
from inference.generation.use_case import Generation
from inference.responses import objects, schema
from inference.responses.planning import prepare_response
from inference.responses.serializers import ResponsesRequestSerializer
from inference.responses.storage import delete_response, stored_response
from inference.responses.stream import StoredEvents, create_response
from inference.sse import TypedEventsBody
from inference.views.base import AsyncApiView, event_stream, json_response


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
        await generation.open()
        if not generation.plan.stream:
            return json_response(await create_response(generation))
        formatter = generation.formatter
        return event_stream(
            TypedEventsBody(
                StoredEvents(generation),
                on_error=lambda exc: formatter.error_event(error_from_exception(exc).body()),
            )
        )


class ResponseDetailView(AsyncApiView):
    """A stored response of the caller's tenant (404 for any other id)."""

    endpoint = "responses"

    @extend_schema(
        operation_id="getResponse",
        responses={200: schema.FOUND},
        tags=["OpenAI"],
    )
    async def get(self, request, response_id: str):
        principal = await self.authenticate()
        stored = await stored_response(principal, response_id)
        return json_response(stored.response)

    @extend_schema(
        operation_id="deleteResponse",
        responses={200: schema.GONE},
        tags=["OpenAI"],
    )
    async def delete(self, request, response_id: str):
        principal = await self.authenticate()
        await delete_response(principal, response_id)
        return json_response(objects.deleted(response_id))


def _page(items: list[dict], *, order: str, after: str | None, limit: int) -> dict[str, Any]:
    if order == "desc":
        items = items[::-1]
    if after:
        ids = [item["id"] for item in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }


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
        order = request.GET.get("order", "desc")
        if order not in ("asc", "desc"):
            raise invalid_request("order must be 'asc' or 'desc'.", param="order")
        try:
            limit = int(request.GET.get("limit", "20"))
        except ValueError:
            limit = 0
        if not 1 <= limit <= 100:
            raise invalid_request("limit must be an integer from 1 to 100.", param="limit")
        stored = await stored_response(principal, response_id)
        page = _page(stored.input_items, order=order, after=request.GET.get("after"), limit=limit)
        return json_response(page)
