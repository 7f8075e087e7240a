"""Anthropic's Message Batches API on the Batch API's machinery.

A message batch is a Batch of endpoint /v1/messages (id ``msgbatch_...``) whose input file the
server writes from the request list: the same worker runs its lines under the key that
created it, at batch priority, and keeps their results. This module makes and lists them, and
shows them as Anthropic does: the batch object (``processing_status``, ``request_counts``)
and the results, one JSON line per request (``succeeded``, ``errored``, ``canceled`` or
``expired``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist
from django.db import transaction
from django.utils import timezone

from controlplane.batches.models import (
    MESSAGE_BATCH_PREFIX,
    Batch,
    StoredFile,
    new_message_batch_id,
)
from controlplane.batches.services import (
    COMPLETION_WINDOWS,
    QUEUED_GRACE,
    batch_cancel,
    enqueue_batch,
    file_from_lines,
    file_open,
)
from controlplane.batches.storage import file_storage
from controlplane.common.anthropic_errors import error_type
from controlplane.common.api_error import ApiError

ENDPOINT = "/v1/messages"
_CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
Status = Batch.Status


def _bad(message: str, param: str) -> ApiError:
    return ApiError(message, param=param)


def _checked_requests(requests) -> list[dict]:
    if not isinstance(requests, list) or not requests:
        raise _bad("requests must be a non-empty list of {custom_id, params}.", "requests")
    if len(requests) > settings.BATCH_MAX_LINES:
        raise _bad(
            f"A batch holds at most {settings.BATCH_MAX_LINES} requests; got {len(requests)}.",
            "requests",
        )
    seen: set[str] = set()
    for i, item in enumerate(requests):
        if not isinstance(item, dict):
            raise _bad("Each request is an object {custom_id, params}.", f"requests[{i}]")
        custom_id = item.get("custom_id")
        if not isinstance(custom_id, str) or not _CUSTOM_ID.fullmatch(custom_id):
            raise _bad(
                "custom_id is 1 to 64 letters, digits, '_' or '-'.", f"requests[{i}].custom_id"
            )
        if custom_id in seen:
            raise _bad(f"custom_id {custom_id!r} is used twice.", f"requests[{i}].custom_id")
        seen.add(custom_id)
        if not isinstance(item.get("params"), dict):
            raise _bad("params must be a Messages request body.", f"requests[{i}].params")
    return requests


def _input_file(tenant_id: int, batch_id: str, requests: list[dict]) -> StoredFile:
    """The requests as the batch worker reads them: one Batch API line each."""
    lines = (
        json.dumps(
            {"custom_id": r["custom_id"], "method": "POST", "url": ENDPOINT, "body": r["params"]},
            ensure_ascii=False,
        ).encode()
        + b"\n"
        for r in requests
    )
    return file_from_lines(
        tenant_id=tenant_id,
        lines=lines,
        filename=f"{batch_id}_requests.jsonl",
        purpose="message_batch",
    )


@transaction.atomic
def message_batch_create(*, tenant_id: int, api_key_id: int | None, requests) -> Batch:
    """A batch of Messages requests, queued for the batch worker (24 hours to run)."""
    requests = _checked_requests(requests)
    batch_id = new_message_batch_id()
    stored = _input_file(tenant_id, batch_id, requests)
    now = timezone.now()
    batch = Batch.objects.create(
        id=batch_id,
        tenant_id=tenant_id,
        api_key_id=api_key_id or None,
        endpoint=ENDPOINT,
        input_file=stored,
        input_file_id_text=stored.id,
        total=len(requests),
        created_at=now,
        expires_at=now + COMPLETION_WINDOWS["24h"],
        lease_until=now + QUEUED_GRACE,
    )
    enqueue_batch(batch.id)
    return batch


def message_batch_get(*, tenant_id: int, batch_id: str) -> Batch:
    found = Batch.objects.filter(
        tenant_id=tenant_id, pk=batch_id, pk__startswith=MESSAGE_BATCH_PREFIX
    ).first()
    if found is None:
        raise ApiError(f"No message batch found with id '{batch_id}'.", status=404)
    return found


def message_batch_list(
    *, tenant_id: int, before_id: str | None, after_id: str | None, limit: int
) -> tuple[list[Batch], bool]:
    """A page, newest first: the batches older than ``after_id``, or newer than
    ``before_id``, or the newest; and whether there are more beyond it."""
    batches = Batch.objects.filter(tenant_id=tenant_id, pk__startswith=MESSAGE_BATCH_PREFIX)
    newest_first = batches.order_by("-created_at", "-pk")
    anchor_id = after_id or before_id
    if anchor_id:
        anchor = message_batch_get(tenant_id=tenant_id, batch_id=anchor_id)
        key = (anchor.created_at, anchor.pk)
        if after_id:
            older = newest_first.filter(created_at__lte=key[0]).exclude(
                created_at=key[0], pk__gte=key[1]
            )
            page = list(older[: limit + 1])
            return page[:limit], len(page) > limit
        newer = batches.order_by("created_at", "pk").filter(created_at__gte=key[0])
        page = list(newer.exclude(created_at=key[0], pk__lte=key[1])[: limit + 1])
        return page[:limit][::-1], len(page) > limit
    page = list(newest_first[: limit + 1])
    return page[:limit], len(page) > limit


def message_batch_cancel(*, tenant_id: int, batch_id: str) -> Batch:
    message_batch_get(tenant_id=tenant_id, batch_id=batch_id)
    return batch_cancel(tenant_id=tenant_id, batch_id=batch_id)


@transaction.atomic
def message_batch_delete(*, tenant_id: int, batch_id: str) -> None:
    """Delete an ended batch with its files (requests and results)."""
    batch = message_batch_get(tenant_id=tenant_id, batch_id=batch_id)
    if batch.status not in Batch.FINAL:
        raise ApiError(
            "A message batch still processing cannot be deleted; cancel it first.",
            status=409,
            code="invalid_state",
        )
    files = [f for f in (batch.input_file, batch.output_file, batch.error_file) if f]
    names = [f.storage_name for f in files]
    batch.delete()
    for stored in files:
        stored.delete()
    transaction.on_commit(lambda: [file_storage().delete(name) for name in names])


# As Anthropic shows them ----------------------------------------------------------------------


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def processing_status(batch: Batch) -> str:
    if batch.status in Batch.FINAL:
        return "ended"
    return "canceling" if batch.status == Status.CANCELLING else "in_progress"


def _error_lines(batch: Batch) -> Iterator[dict]:
    if batch.error_file is None:
        return
    with file_open(batch.error_file) as handle:
        for raw in handle:
            if raw.strip():
                yield json.loads(raw)


def request_counts(batch: Batch) -> dict[str, int]:
    done = batch.completed + batch.failed
    counts = {"processing": 0, "succeeded": batch.completed, "errored": batch.failed}
    counts.update(canceled=0, expired=0)
    if batch.status == Status.FAILED:  # the whole batch could not run
        counts.update(succeeded=0, errored=batch.total)
    elif batch.status == Status.CANCELLED:
        counts["canceled"] = max(0, batch.total - done)
    elif batch.status == Status.EXPIRED:
        expired = sum(1 for line in _error_lines(batch) if _expired(line))
        counts.update(errored=batch.failed - expired, expired=expired)
    elif batch.status not in Batch.FINAL:
        counts["processing"] = max(0, batch.total - done)
    return counts


def message_batch_object(batch: Batch, *, results_url: str) -> dict:
    ended = processing_status(batch) == "ended"
    return {
        "id": batch.id,
        "type": "message_batch",
        "processing_status": processing_status(batch),
        "request_counts": request_counts(batch),
        "ended_at": _iso(
            batch.completed_at or batch.cancelled_at or batch.expired_at or batch.failed_at
        )
        if ended
        else None,
        "created_at": _iso(batch.created_at),
        "expires_at": _iso(batch.expires_at),
        "cancel_initiated_at": _iso(batch.cancelling_at),
        "archived_at": None,
        "results_url": results_url if ended else None,
    }


def _expired(line: dict) -> bool:
    return (line.get("error") or {}).get("code") == "batch_expired"


def _result(line: dict) -> dict:
    """A Batch API output or error line as Anthropic's result."""
    response = line.get("response")
    if response and response.get("status_code") == 200:
        return {"type": "succeeded", "message": response["body"]}
    if _expired(line):
        return {"type": "expired"}
    if response:
        status = int(response.get("status_code") or 500)
        body = response.get("body") or {}
        message = (body.get("error") or {}).get("message") or f"HTTP {status}"
    else:
        status, message = 400, (line.get("error") or {}).get("message") or "invalid request"
    error = {"type": error_type(status), "message": message}
    return {"type": "errored", "error": {"type": "error", "error": error}}


def _requested_ids(handle) -> Iterator[str]:
    for raw in handle:
        if raw.strip():
            yield json.loads(raw)["custom_id"]


def message_batch_results(batch: Batch) -> Iterator[str]:
    """An ended batch's results, a JSON line each: the answered requests in input order,
    then the ones that failed, then the ones a cancel left unrun.

    The files are opened here, before the first line is read: a DELETE of the batch while
    its results stream removes the rows and the files, and an open file stays readable. A
    batch deleted already is a 404."""
    opened: list = []
    try:
        for stored in (batch.output_file, batch.error_file):
            if stored is not None:
                opened.append(file_open(stored))
        unrun = batch.status in (Status.CANCELLED, Status.FAILED) and batch.input_file
        requested = file_open(batch.input_file) if unrun else None
    except (ObjectDoesNotExist, OSError) as exc:
        for handle in opened:
            handle.close()
        raise ApiError(f"No message batch found with id '{batch.id}'.", status=404) from exc
    return _result_lines(batch.status, opened, requested)


def _result_lines(status: str, results: list, requested) -> Iterator[str]:
    seen: set[str] = set()
    try:
        for handle in results:
            for raw in handle:
                if not raw.strip():
                    continue
                line = json.loads(raw)
                seen.add(line.get("custom_id"))
                result = {"custom_id": line.get("custom_id"), "result": _result(line)}
                yield json.dumps(result, ensure_ascii=False) + "\n"
        kind = "canceled" if status == Status.CANCELLED else "errored"
        for custom_id in _requested_ids(requested) if requested is not None else ():
            if custom_id not in seen:
                result = {"type": kind}
                if kind == "errored":
                    error = {"type": "api_error", "message": "The batch could not be run."}
                    result["error"] = {"type": "error", "error": error}
                yield json.dumps({"custom_id": custom_id, "result": result}) + "\n"
    finally:
        for handle in [*results, requested]:
            if handle is not None:
                handle.close()
