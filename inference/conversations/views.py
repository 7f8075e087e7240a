"""/v1/conversations: create, retrieve, update the metadata of and delete a conversation; add,
list, retrieve and delete its items. Only this key's tenant's conversations; any other id is
a 404. A key with scopes needs ``responses`` (conversations are the Responses API's state)."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema

from controlplane.common.cursor_pages import page_object
from controlplane.responses import conversations as services
from inference.conversations.serializers import (
    ConversationCreateSerializer,
    ConversationUpdateSerializer,
    ItemsAddSerializer,
)
from inference.schemas.pages import PAGE_PARAMETERS
from inference.schemas.validation import validate_body
from inference.views.base import AsyncApiView, json_response
from inference.views.list_params import page_params
from inference.zero_retention import refuse_keeping

CONVERSATION = OpenApiResponse(description="A conversation object.")
ITEMS = OpenApiResponse(description="A page of conversation items.")
ITEM = OpenApiResponse(description="A conversation item.")
ORDER = OpenApiParameter("order", str, enum=["asc", "desc"], description="default desc")


class ConversationRoute(AsyncApiView):
    endpoint = "responses"

    async def authenticate(self):
        principal = await super().authenticate()
        refuse_keeping(principal, "the Conversations API is off for it")
        return principal


class ConversationsView(ConversationRoute):
    @extend_schema(
        operation_id="createConversation",
        request=ConversationCreateSerializer,
        responses={200: CONVERSATION},
        tags=["OpenAI"],
    )
    async def post(self, request):
        principal = await self.authenticate()
        body = validate_body(ConversationCreateSerializer, self.json_body())
        created = await sync_to_async(services.conversation_create)(
            tenant_id=principal.tenant_id,
            key_prefix=principal.key_prefix,
            metadata=dict(body.get("metadata") or {}),
            items=body.get("items") or [],
        )
        return json_response(services.conversation_object(created))


class ConversationDetailView(ConversationRoute):
    @extend_schema(operation_id="getConversation", responses={200: CONVERSATION}, tags=["OpenAI"])
    async def get(self, request, conversation_id: str):
        principal = await self.authenticate()
        found = await sync_to_async(services.conversation_get)(
            tenant_id=principal.tenant_id, conversation_id=conversation_id
        )
        return json_response(services.conversation_object(found))

    @extend_schema(
        operation_id="updateConversation",
        request=ConversationUpdateSerializer,
        responses={200: CONVERSATION},
        tags=["OpenAI"],
    )
    async def post(self, request, conversation_id: str):
        principal = await self.authenticate()
        body = validate_body(ConversationUpdateSerializer, self.json_body())
        updated = await sync_to_async(services.conversation_update)(
            tenant_id=principal.tenant_id,
            conversation_id=conversation_id,
            metadata=dict(body["metadata"] or {}),
        )
        return json_response(services.conversation_object(updated))

    @extend_schema(
        operation_id="deleteConversation",
        responses={200: OpenApiResponse(description="conversation.deleted")},
        tags=["OpenAI"],
    )
    async def delete(self, request, conversation_id: str):
        principal = await self.authenticate()
        await sync_to_async(services.conversation_delete)(
            tenant_id=principal.tenant_id, conversation_id=conversation_id
        )
        return json_response(
            {"id": conversation_id, "object": "conversation.deleted", "deleted": True}
        )


class ConversationItemsView(ConversationRoute):
    @extend_schema(
        operation_id="createConversationItems",
        request=ItemsAddSerializer,
        responses={200: ITEMS},
        tags=["OpenAI"],
    )
    async def post(self, request, conversation_id: str):
        principal = await self.authenticate()
        body = validate_body(ItemsAddSerializer, self.json_body())
        added = await sync_to_async(services.items_add)(
            tenant_id=principal.tenant_id, conversation_id=conversation_id, items=body["items"]
        )
        return json_response(page_object(added, limit=len(added), render=dict))

    @extend_schema(
        operation_id="listConversationItems",
        parameters=[*PAGE_PARAMETERS, ORDER],
        responses={200: ITEMS},
        tags=["OpenAI"],
    )
    async def get(self, request, conversation_id: str):
        principal = await self.authenticate()
        after, limit, ascending = page_params(request.GET, default_limit=20)
        found = await sync_to_async(services.items_page)(
            tenant_id=principal.tenant_id,
            conversation_id=conversation_id,
            after=after,
            limit=limit,
            ascending=ascending,
        )
        return json_response(page_object(found, limit=limit, render=dict))


class ConversationItemDetailView(ConversationRoute):
    @extend_schema(operation_id="getConversationItem", responses={200: ITEM}, tags=["OpenAI"])
    async def get(self, request, conversation_id: str, item_id: str):
        principal = await self.authenticate()
        item = await sync_to_async(services.item_get)(
            tenant_id=principal.tenant_id, conversation_id=conversation_id, item_id=item_id
        )
        return json_response(item)

    @extend_schema(
        operation_id="deleteConversationItem", responses={200: CONVERSATION}, tags=["OpenAI"]
    )
    async def delete(self, request, conversation_id: str, item_id: str):
        principal = await self.authenticate()
        found = await sync_to_async(services.item_delete)(
            tenant_id=principal.tenant_id, conversation_id=conversation_id, item_id=item_id
        )
        return json_response(services.conversation_object(found))
