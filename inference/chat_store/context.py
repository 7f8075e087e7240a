"""What a chat request asking to be stored carries to where its answer is stored."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controlplane.access.principals import Principal


@dataclass
class ChatStoreContext:
    tenant_id: int
    key_prefix: str
    messages: list[dict[str, Any]]  # as the client sent them
    metadata: dict[str, str] = field(default_factory=dict)


def store_context(
    principal: Principal, body: dict[str, Any], messages: list[dict[str, Any]]
) -> ChatStoreContext | None:
    """Where a validated chat ``body`` is stored, or None unless it asked (``store: true``)
    and its tenant keeps data (no zero data retention: then store is treated as false, as
    OpenAI does). ``messages`` are the raw body's, kept as the client wrote them."""
    if not body.get("store") or principal.zero_data_retention:
        return None
    return ChatStoreContext(
        tenant_id=principal.tenant_id,
        key_prefix=principal.key_prefix,
        messages=messages,
        metadata=dict(body.get("metadata") or {}),
    )
