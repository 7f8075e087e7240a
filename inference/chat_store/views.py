"""OpenAI's stored chat completion endpoints: list (``GET /v1/chat/completions``), retrieve,
update the metadata of and delete one, list the messages it answered. Only what this key's
tenant stored with ``store: true``; any other id is a 404."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers

from controlplane.chat_store import services
from controlplane.common.cursor_pages import page_object
from inference.errors import invalid_request
from inference.schemas.fields import MetadataField
from inference.schemas.pages import PAGE_PARAMETERS
from inference.schemas.validation import validate_body
from inference.views.base import AsyncApiView, json_response
from inference.views.list_params import item_page, page_params

ORDER = OpenApiParameter("order", str, enum=["asc", "desc"], description="default asc")
COMPLETION = OpenApiResponse(description="A stored chat.completion, with its metadata.")


class MetadataUpdateSerializer(serializers.Serializer):
    metadata = MetadataField(required=True, help_text="Replaces the stored metadata.")


def metadata_filter(query) -> dict[str, str]:
    """``metadata[key]=value`` query parameters (as the openai SDKs send a metadata filter)."""
    pairs = {}
    for name, value in query.items():
        if name.startswith("metadata[") and name.endswith("]"):
            pairs[name[len("metadata[") : -1]] = value
        elif name == "metadata":
            raise invalid_request(
                "Filter by metadata as metadata[key]=value query parameters.", param="metadata"
            )
    return pairs


class StoredCompletionListing:
    """``GET /v1/chat/completions``: the tenant's stored completions, oldest first unless
    ``order=desc``, filtered by ``model`` and by ``metadata[key]=value`` pairs (all must hold)."""

    @extend_schema(
        operation_id="listChatCompletions",
        parameters=[
            *PAGE_PARAMETERS,
            ORDER,
            OpenApiParameter("model", str, description="Only completions of this model."),
            OpenApiParameter(
                "metadata",
                {"type": "object", "additionalProperties": {"type": "string"}},
                style="deepObject",
                description="metadata[key]=value: only completions whose metadata holds it.",
            ),
        ],
        responses={200: OpenApiResponse(description="A page of stored chat.completion objects.")},
        tags=["OpenAI"],
    )
    async def get(self, request):
        principal = await self.authenticate()
        after, limit, ascending = page_params(request.GET, default_limit=20, default_order="asc")
        found = await sync_to_async(services.completion_list)(
            tenant_id=principal.tenant_id,
            model=request.GET.get("model") or None,
            metadata=metadata_filter(request.GET),
            after=after,
            limit=limit,
            ascending=ascending,
        )
        return json_response(page_object(found, limit=limit, render=services.completion_object))


class ChatCompletionDetailView(AsyncApiView):
    endpoint = "chat.completions"

    @extend_schema(operation_id="getChatCompletion", responses={200: COMPLETION}, tags=["OpenAI"])
    async def get(self, request, completion_id: str):
        principal = await self.authenticate()
        stored = await sync_to_async(services.completion_get)(
            tenant_id=principal.tenant_id, completion_id=completion_id
        )
        return json_response(services.completion_object(stored))

    @extend_schema(
        operation_id="updateChatCompletion",
        request=MetadataUpdateSerializer,
        responses={200: COMPLETION},
        tags=["OpenAI"],
    )
    async def post(self, request, completion_id: str):
        principal = await self.authenticate()
        body = validate_body(MetadataUpdateSerializer, self.json_body())
        stored = await sync_to_async(services.completion_update)(
            tenant_id=principal.tenant_id,
            completion_id=completion_id,
            metadata=dict(body["metadata"] or {}),
        )
        return json_response(services.completion_object(stored))

    @extend_schema(
        operation_id="deleteChatCompletion",
        responses={200: OpenApiResponse(description="chat.completion.deleted")},
        tags=["OpenAI"],
    )
    async def delete(self, request, completion_id: str):
        principal = await self.authenticate()
        await sync_to_async(services.completion_delete)(
            tenant_id=principal.tenant_id, completion_id=completion_id
        )
        return json_response(
            {"object": "chat.completion.deleted", "id": completion_id, "deleted": True}
        )


class ChatCompletionMessagesView(AsyncApiView):
    """The messages a stored completion answered, as its request sent them, each with an id."""

    endpoint = "chat.completions"

    @extend_schema(
        operation_id="getChatCompletionMessages",
        parameters=[*PAGE_PARAMETERS, ORDER],
        responses={200: OpenApiResponse(description="A page of the request's messages.")},
        tags=["OpenAI"],
    )
    async def get(self, request, completion_id: str):
        principal = await self.authenticate()
        after, limit, ascending = page_params(request.GET, default_limit=20, default_order="asc")
        stored = await sync_to_async(services.completion_get)(
            tenant_id=principal.tenant_id, completion_id=completion_id
        )
        return json_response(
            item_page(stored.messages, after=after, limit=limit, ascending=ascending)
        )
