"""Reads on files and batches, always within one tenant: another tenant's ids are not found."""

from __future__ import annotations

from controlplane.batches.models import MESSAGE_BATCH_PREFIX, Batch, BatchResult, StoredFile
from controlplane.common.api_error import ApiError
from controlplane.common.cursor_pages import cursor_page
from controlplane.tenants.selectors import KeyRecord, key_record_for


def not_found(kind: str, object_id: str) -> ApiError:
    # The same answer for "does not exist" and "another tenant's": nothing leaks across tenants.
    return ApiError(f"No such {kind}: '{object_id}'", status=404, code="not_found")


def file_get(*, tenant_id: int, file_id: str) -> StoredFile:
    found = StoredFile.objects.filter(tenant_id=tenant_id, pk=file_id).first()
    if found is None:
        raise not_found("File", file_id)
    return found


def batch_get(*, tenant_id: int, batch_id: str) -> Batch:
    found = Batch.objects.filter(tenant_id=tenant_id, pk=batch_id).first()
    if found is None:
        raise not_found("batch", batch_id)
    return found


def file_list(
    *, tenant_id: int, purpose: str | None, after: str | None, limit: int, ascending: bool
) -> list[StoredFile]:
    queryset = StoredFile.objects.filter(tenant_id=tenant_id).exclude(purpose="message_batch")
    if purpose:
        queryset = queryset.filter(purpose=purpose)
    return cursor_page(queryset, after=after, limit=limit, ascending=ascending)


def batch_list(*, tenant_id: int, after: str | None, limit: int) -> list[Batch]:
    """The tenant's Batch API batches, newest first (Message Batches API ones are listed by
    message_batches.py)."""
    batches = Batch.objects.filter(tenant_id=tenant_id).exclude(pk__startswith=MESSAGE_BATCH_PREFIX)
    return cursor_page(batches, after=after, limit=limit, ascending=False)


def batch_done_lines(*, batch_id: str) -> set[int]:
    """Line numbers whose result is written: a resumed batch skips them."""
    return set(BatchResult.objects.filter(batch_id=batch_id).values_list("line", flat=True))


def batch_result_counts(*, batch_id: str) -> tuple[int, int]:
    """(completed, failed) lines so far."""
    results = BatchResult.objects.filter(batch_id=batch_id)
    return results.filter(ok=True).count(), results.filter(ok=False).count()


def batch_key_record(*, batch_id: str) -> KeyRecord | None:
    """The key that created the batch (its lines run under it), None if it was deleted."""
    batch = Batch.objects.select_related("api_key__tenant").get(pk=batch_id)
    key = batch.api_key
    return None if key is None else key_record_for(key, key.tenant)
