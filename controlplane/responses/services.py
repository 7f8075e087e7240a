"""Stored responses, always through the owning tenant: another tenant's id is "not found"."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from controlplane.common.api_error import ApiError, object_not_found
from controlplane.responses.models import StoredResponse

# The statuses of a background response still running (docs/api.md, "Background responses").
RUNNING = ("queued", "in_progress")


def response_not_found(response_id: str) -> ApiError:
    # The same answer for an id that never existed, one of another tenant and one not stored.
    return object_not_found("response", response_id, param="response_id", code="response_not_found")


def response_store(
    *,
    tenant_id: int,
    key_prefix: str,
    response: dict[str, Any],
    input_items: list[dict[str, Any]],
) -> StoredResponse | None:
    """Keep a finished response. A background one's row exists already (started queued):
    its end is written there instead, unless a client cancelled or deleted it meanwhile
    (then None: nothing was kept)."""
    if response.get("background"):
        existing = StoredResponse.objects.filter(pk=response["id"]).only("pk").first()
        if existing is not None:
            return existing if background_finish(existing.pk, response) else None
    return StoredResponse.objects.create(
        id=response["id"],
        tenant_id=tenant_id,
        key_prefix=key_prefix[:32],
        model=response["model"][:200],
        status=response.get("status") or "completed",
        previous_response_id=response.get("previous_response_id") or "",
        instructions=response.get("instructions"),
        input_items=input_items,
        response=response,
    )


def background_finish(response_id: str, response: dict[str, Any]) -> bool:
    """Write a background response's end (done or failed), unless a client cancelled or
    deleted it meanwhile. Whether it was written."""
    updated = StoredResponse.objects.filter(pk=response_id, status__in=RUNNING).update(
        status=response["status"], response=response, heartbeat_at=timezone.now()
    )
    return bool(updated)


def response_get(*, tenant_id: int, response_id: str) -> StoredResponse:
    """The tenant's stored response (ApiError 404 otherwise)."""
    found = StoredResponse.objects.filter(tenant_id=tenant_id, id=response_id).first()
    if found is None:
        raise response_not_found(response_id)
    return found


def response_delete(*, tenant_id: int, response_id: str) -> None:
    deleted, _ = StoredResponse.objects.filter(tenant_id=tenant_id, id=response_id).delete()
    if not deleted:
        raise response_not_found(response_id)
