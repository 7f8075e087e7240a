"""Background responses (``background: true``) in the database: made ``queued`` when the
request is answered, kept alive by the API process running them (a heartbeat), finished,
failed or cancelled. A background response whose heartbeat stopped while it still ran (its
process died) is failed when next read, so a client polling it gets an answer."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from controlplane.common.api_error import ApiError
from controlplane.responses.models import StoredResponse
from controlplane.responses.services import RUNNING, background_finish, response_get

FINISHED = ("completed", "incomplete", "failed")
# The runner beats every BEAT_S seconds; STALE_AFTER_S without one, it is taken for dead.
BEAT_S = 2.0
STALE_AFTER_S = 30.0


def background_start(
    *, tenant_id: int, key_prefix: str, response: dict[str, Any], input_items: list[dict]
) -> StoredResponse:
    """The row of a background response being started: ``response`` as first answered."""
    return StoredResponse.objects.create(
        id=response["id"],
        tenant_id=tenant_id,
        key_prefix=key_prefix[:32],
        model=response["model"][:200],
        status=response["status"],
        previous_response_id=response.get("previous_response_id") or "",
        instructions=response.get("instructions"),
        input_items=input_items,
        response=response,
        background=True,
        heartbeat_at=timezone.now(),
    )


def background_beat(response_id: str, *, status: str = "in_progress") -> str | None:
    """Mark a running background response alive (and ``status``); its status now: a client
    may have cancelled it (``cancelled``) or deleted it (None)."""
    with transaction.atomic():
        found = StoredResponse.objects.select_for_update().filter(pk=response_id).first()
        if found is None:
            return None
        if found.status in RUNNING:
            found.status = status
            found.response = {**found.response, "status": status}
            found.heartbeat_at = timezone.now()
            found.save(update_fields=["status", "response", "heartbeat_at"])
        return found.status


def failed_response(response: dict[str, Any], *, code: str, message: str) -> dict[str, Any]:
    return {**response, "status": "failed", "error": {"code": code, "message": message}}


def background_get(*, tenant_id: int, response_id: str) -> StoredResponse:
    """The tenant's stored response; a background one whose process stopped is failed first."""
    found = response_get(tenant_id=tenant_id, response_id=response_id)
    stale = timezone.now() - timedelta(seconds=STALE_AFTER_S)
    if found.background and found.status in RUNNING and found.heartbeat_at < stale:
        ended = failed_response(
            found.response,
            code="server_error",
            message="The server process running this background response stopped before it "
            "finished; create it again.",
        )
        if background_finish(found.id, ended):
            return response_get(tenant_id=tenant_id, response_id=response_id)
    return found


def background_cancel(*, tenant_id: int, response_id: str) -> StoredResponse:
    """Cancel a running background response: its process sees it at its next beat and stops
    the generation. Cancelling one already cancelled answers it as it is."""
    found = background_get(tenant_id=tenant_id, response_id=response_id)
    if not found.background:
        raise ApiError(
            "Only responses created with background: true can be cancelled.",
            param="response_id",
        )
    if found.status in FINISHED:
        raise ApiError(
            f"This response has already finished (status {found.status!r}); it cannot be "
            "cancelled.",
            param="response_id",
        )
    cancelled = {**found.response, "status": "cancelled"}
    StoredResponse.objects.filter(pk=found.pk, status__in=RUNNING).update(
        status="cancelled", response=cancelled
    )
    # Read again, by the tenant: a 404, as for any deleted response, if a DELETE came between.
    return response_get(tenant_id=tenant_id, response_id=response_id)
