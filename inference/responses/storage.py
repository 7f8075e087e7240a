"""Stored responses, through the control plane's tenant-scoped services (database calls run
off the event loop)."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async

from controlplane.access.principals import Principal
from controlplane.common.api_error import ApiError
from controlplane.responses import background, conversations, services
from inference.responses.context import ResponseContext
from inference.responses.items import output_as_input


async def conversation_before(principal: Principal, previous_id: str | None) -> list[dict]:
    """The input items that continue ``previous_id``: its conversation, then its output.
    404 for an id the tenant has not stored (another tenant's, or one made with store false)."""
    if not previous_id:
        return []
    previous = await stored_response(principal, previous_id)
    if previous.status in services.RUNNING:
        raise ApiError(
            f"Response '{previous_id}' is still running in the background; continue it once "
            "it has finished.",
            param="previous_response_id",
        )
    return list(previous.input_items) + output_as_input(previous.response.get("output") or [])


async def conversation_items(principal: Principal, conversation_id: str) -> list[dict]:
    """Every item of the tenant's conversation (404 for any other id)."""
    return await sync_to_async(conversations.items_history)(
        tenant_id=principal.tenant_id, conversation_id=conversation_id
    )


async def store_response(context: ResponseContext, response: dict[str, Any]) -> None:
    """Keep a finished response, unless the request said ``store: false``; in a
    conversation, add the request's input items and the response's output to it (whatever
    ``store`` says, as OpenAI does)."""
    if context.store:
        kept = await sync_to_async(services.response_store)(
            tenant_id=context.tenant_id,
            key_prefix=context.key_prefix,
            response=response,
            input_items=context.input_items,
        )
        if kept is None:  # a background response cancelled meanwhile: its turn is not added
            return
    if context.conversation_id:
        await sync_to_async(conversations.items_add)(
            tenant_id=context.tenant_id,
            conversation_id=context.conversation_id,
            items=context.request_items + output_as_input(response.get("output") or []),
        )


async def stored_response(principal: Principal, response_id: str):
    """The tenant's stored response (a background one whose process stopped: failed)."""
    return await sync_to_async(background.background_get)(
        tenant_id=principal.tenant_id, response_id=response_id
    )


async def delete_response(principal: Principal, response_id: str) -> None:
    await sync_to_async(services.response_delete)(
        tenant_id=principal.tenant_id, response_id=response_id
    )
