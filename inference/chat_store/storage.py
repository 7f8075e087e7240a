"""Stored chat completions, through the control plane's tenant-scoped services (database
calls run off the event loop)."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async

from controlplane.chat_store import services
from inference.chat_store.context import ChatStoreContext


async def store_completion(context: ChatStoreContext, completion: dict[str, Any]) -> None:
    await sync_to_async(services.completion_store)(
        tenant_id=context.tenant_id,
        key_prefix=context.key_prefix,
        completion=completion,
        messages=context.messages,
        metadata=context.metadata,
    )
