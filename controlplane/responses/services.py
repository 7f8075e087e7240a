"""Stored responses, always through the owning tenant: another tenant's id is "not found"."""

from __future__ import annotations

from typing import Any

from controlplane.common.api_error import ApiError
from controlplane.responses.models import StoredResponse


def response_not_found(response_id: str) -> ApiError:
    # The same answer for an id that never existed, one of another tenant and one not stored.
    return ApiError(
        f"No response found with id '{response_id}'.",
        status=404,
        param="response_id",
        code="response_not_found",
    )


def response_store(
    *,
    tenant_id: int,
    key_prefix: str,
    response: dict[str, Any],
    input_items: list[dict[str, Any]],
) -> StoredResponse:
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
