"""Stored responses, through the control plane's tenant-scoped services (database calls run
off the event loop)."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async

from controlplane.access.principals import Principal
from controlplane.responses import services
from inference.responses.context import ResponseContext
from inference.responses.items import output_as_input


async def conversation_before(principal: Principal, previous_id: str | None) -> list[dict]:
    """The input items that continue ``previous_id``: its conversation, then its output.
    404 for an id the tenant has not stored (another tenant's, or one made with store false)."""
    if not previous_id:
        return []
    previous = await sync_to_async(services.response_get)(
        tenant_id=principal.tenant_id, response_id=previous_id
    )
    return list(previous.input_items) + output_as_input(previous.response.get("output") or [])


async def store_response(context: ResponseContext, response: dict[str, Any]) -> None:
    """Keep a finished response, unless the request said ``store: false``."""
    if not context.store:
        return
    await sync_to_async(services.response_store)(
        tenant_id=context.tenant_id,
        key_prefix=context.key_prefix,
        response=response,
        input_items=context.input_items,
    )


async def stored_response(principal: Principal, response_id: str):
    return await sync_to_async(services.response_get)(
        tenant_id=principal.tenant_id, response_id=response_id
    )


async def delete_response(principal: Principal, response_id: str) -> None:
    await sync_to_async(services.response_delete)(
        tenant_id=principal.tenant_id, response_id=response_id
    )
