"""Writes on files and batches. The API views and the admin call these; so does the batch
runner (inference/batches), through the ``batch_*`` lifecycle functions below."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterable
from datetime import timedelta

from celery import current_app
from django.conf import settings
from django.core.files import File
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from controlplane.batches.models import Batch, BatchResult, StoredFile, new_file_id
from controlplane.batches.selectors import batch_get, batch_result_counts, file_get
from controlplane.batches.storage import file_storage
from controlplane.common.api_error import ApiError

# What the Batch API runs; the worker runs /v1/messages too, for message batches.
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
COMPLETION_WINDOWS = {"24h": timedelta(hours=24)}
# A queued batch (no worker yet) is sent again if no worker took it in this long.
QUEUED_GRACE = timedelta(minutes=10)
Status = Batch.Status

logger = logging.getLogger(__name__)


# Files ----------------------------------------------------------------------------------------


def file_too_large(limit: int) -> ApiError:
    return ApiError(
        f"The file is larger than this server accepts ({limit} bytes).",
        status=413,
        code="file_too_large",
        param="file",
    )


def file_create(*, tenant_id: int, upload: File, filename: str, purpose: str) -> StoredFile:
    """Store an uploaded file (already on disk or in memory, chunk by chunk: never read whole)."""
    if purpose != "batch":
        raise ApiError(
            f"Unsupported purpose {purpose!r}: this server stores files for `batch` only.",
            param="purpose",
        )
    if upload.size > settings.FILES_MAX_UPLOAD_BYTES:
        raise file_too_large(settings.FILES_MAX_UPLOAD_BYTES)
    if upload.size == 0:
        raise ApiError("The file is empty.", param="file")
    file_id = new_file_id()
    name = file_storage().save(f"{tenant_id}/{file_id}.jsonl", upload)
    return StoredFile.objects.create(
        id=file_id,
        tenant_id=tenant_id,
        filename=os.path.basename(filename)[:255] or "upload.jsonl",
        purpose=purpose,
        bytes=upload.size,
        storage_name=name,
    )


def file_delete(*, tenant_id: int, file_id: str) -> None:
    stored = file_get(tenant_id=tenant_id, file_id=file_id)
    running = stored.input_of.exclude(status__in=Batch.FINAL).first()
    if running is not None:
        raise ApiError(
            f"The file is the input of batch {running.id}, which has not finished; cancel it or "
            "wait for it first.",
            status=409,
            code="file_in_use",
        )
    name = stored.storage_name
    stored.delete()
    transaction.on_commit(lambda: file_storage().delete(name))


def file_open(stored: StoredFile):
    """The file's bytes as a binary file object, read in chunks by whoever iterates it."""
    return file_storage().open(stored.storage_name, "rb")


# Batches: the API -----------------------------------------------------------------------------


def _check_metadata(metadata) -> dict | None:
    if metadata is None:
        return None
    if not isinstance(metadata, dict) or len(metadata) > 16:
        raise ApiError("metadata must be an object of at most 16 pairs.", param="metadata")
    for key, value in metadata.items():
        if not isinstance(value, str) or len(key) > 64 or len(value) > 512:
            raise ApiError(
                "metadata keys are strings of at most 64 characters and values strings of at "
                "most 512.",
                param="metadata",
            )
    return metadata


def enqueue_batch(batch_id: str) -> None:
    # By name: the task lives in the API layer (inference/batches), which this layer never imports.
    transaction.on_commit(lambda: current_app.send_task("batches.run", args=[batch_id]))


@transaction.atomic
def batch_create(
    *,
    tenant_id: int,
    api_key_id: int | None,
    input_file_id: str,
    endpoint: str,
    completion_window: str,
    metadata=None,
) -> Batch:
    if endpoint not in ENDPOINTS:
        raise ApiError(
            f"Unsupported endpoint {endpoint!r}; batches run {', '.join(ENDPOINTS)}.",
            param="endpoint",
        )
    if completion_window not in COMPLETION_WINDOWS:
        raise ApiError("completion_window must be `24h`.", param="completion_window")
    stored = file_get(tenant_id=tenant_id, file_id=input_file_id)
    if stored.purpose != "batch":
        raise ApiError(
            "The input file must be uploaded with purpose `batch`.", param="input_file_id"
        )
    now = timezone.now()
    batch = Batch.objects.create(
        tenant_id=tenant_id,
        api_key_id=api_key_id or None,
        endpoint=endpoint,
        completion_window=completion_window,
        input_file=stored,
        input_file_id_text=stored.id,
        metadata=_check_metadata(metadata),
        created_at=now,
        expires_at=now + COMPLETION_WINDOWS[completion_window],
        lease_until=now + QUEUED_GRACE,
    )
    enqueue_batch(batch.id)
    return batch


@transaction.atomic
def batch_cancel(*, tenant_id: int, batch_id: str) -> Batch:
    """Ask the batch to stop: ``cancelling`` until its worker has stopped its lines and
    written what finished, then ``cancelled``. A batch no worker holds yet is cancelled now."""
    batch = batch_get(tenant_id=tenant_id, batch_id=batch_id)
    batch = Batch.objects.select_for_update().get(pk=batch.pk)
    if batch.status in (Status.CANCELLING, Status.CANCELLED):
        return batch
    if batch.status not in (Status.VALIDATING, Status.IN_PROGRESS):
        raise ApiError(
            f"Cannot cancel a batch with status '{batch.status}'.", status=409, code="invalid_state"
        )
    now = timezone.now()
    batch.status, batch.cancelling_at = Status.CANCELLING, now
    if not batch.lease_owner and not batch.results.exists():
        batch.status, batch.cancelled_at = Status.CANCELLED, now
    batch.save()
    return batch


# Batches: the runner's lifecycle --------------------------------------------------------------


def _lease_end():
    return timezone.now() + timedelta(seconds=settings.BATCH_LEASE_SECONDS)


def batch_claim(*, batch_id: str, owner: str) -> Batch | None:
    """Take the batch for this worker: when nobody holds it, or its holder's lease ran out.
    None when it is finished or another live worker runs it."""
    claimable = Q(lease_owner="") | Q(lease_until__lt=timezone.now()) | Q(lease_owner=owner)
    taken = (
        Batch.objects.filter(pk=batch_id, status__in=Batch.RUNNABLE)
        .filter(claimable)
        .update(lease_owner=owner, lease_until=_lease_end())
    )
    # With its input file: the runner reads it from a thread, where a lazy load would open a
    # database connection of its own.
    return Batch.objects.select_related("input_file").get(pk=batch_id) if taken else None


def batch_renew(*, batch_id: str, owner: str) -> Batch | None:
    """Extend the lease and refresh the counts; None when the lease was lost to another worker."""
    completed, failed = batch_result_counts(batch_id=batch_id)
    kept = Batch.objects.filter(pk=batch_id, lease_owner=owner).update(
        lease_until=_lease_end(), completed=completed, failed=failed
    )
    return Batch.objects.get(pk=batch_id) if kept else None


def batch_start(*, batch_id: str, owner: str, total: int) -> None:
    """validating -> in_progress, with the number of lines."""
    Batch.objects.filter(pk=batch_id, lease_owner=owner, status=Status.VALIDATING).update(
        status=Status.IN_PROGRESS, total=total, in_progress_at=timezone.now()
    )


def batch_record_results(*, batch_id: str, results: list[tuple[int, bool, str]]) -> None:
    """(line, ok, record) for lines that finished; a line already written stays as it was."""
    BatchResult.objects.bulk_create(
        [BatchResult(batch_id=batch_id, line=line, ok=ok, record=rec) for line, ok, rec in results],
        ignore_conflicts=True,
    )


def _write_results_file(batch: Batch, *, ok: bool, suffix: str) -> StoredFile | None:
    """The output (ok) or error file, in input-line order, through a temporary file."""
    results = batch.results.filter(ok=ok).order_by("line").values_list("record", flat=True)
    if not results.exists():
        return None
    lines = (record.encode() + b"\n" for record in results.iterator(chunk_size=500))
    return file_from_lines(
        tenant_id=batch.tenant_id,
        lines=lines,
        filename=f"{batch.id}_{suffix}.jsonl",
        purpose="batch_output",
    )


def file_from_lines(
    *, tenant_id: int, lines: Iterable[bytes], filename: str, purpose: str
) -> StoredFile:
    """A file the server writes (results, a message batch's requests), spooled through a
    temporary file so it is never held whole in memory."""
    with tempfile.TemporaryFile() as spool:
        for line in lines:
            spool.write(line)
        size = spool.tell()
        spool.seek(0)
        file_id = new_file_id()
        name = file_storage().save(f"{tenant_id}/{file_id}.jsonl", File(spool))
    return StoredFile.objects.create(
        id=file_id,
        tenant_id=tenant_id,
        filename=filename,
        purpose=purpose,
        bytes=size,
        storage_name=name,
    )


def batch_finish(*, batch_id: str, owner: str, status: str) -> Batch | None:
    """Write the output and error files and end the batch (completed, cancelled or expired)."""
    now = timezone.now()
    updated = Batch.objects.filter(pk=batch_id, lease_owner=owner).update(finalizing_at=now)
    if not updated:
        return None
    if status == Status.COMPLETED:
        Batch.objects.filter(pk=batch_id).update(status=Status.FINALIZING)
    batch = Batch.objects.get(pk=batch_id)
    output, errors = _write_results_file(batch, ok=True, suffix="output"), None
    errors = _write_results_file(batch, ok=False, suffix="error")
    completed, failed = batch_result_counts(batch_id=batch_id)
    with transaction.atomic():
        Batch.objects.filter(pk=batch_id).update(
            status=status,
            output_file=output,
            error_file=errors,
            completed=completed,
            failed=failed,
            lease_owner="",
            lease_until=None,
            **{f"{status}_at": now},
        )
        batch.results.all().delete()
    return Batch.objects.get(pk=batch_id)


def batch_fail(*, batch_id: str, owner: str, code: str, message: str) -> None:
    """The whole batch could not run (its input file is gone, too many lines)."""
    Batch.objects.filter(pk=batch_id, lease_owner=owner).update(
        status=Status.FAILED,
        failed_at=timezone.now(),
        errors=[{"code": code, "message": message, "param": None, "line": None}],
        lease_owner="",
        lease_until=None,
    )


# Runs ended by an unexpected error after which a batch is failed rather than run again.
BATCH_MAX_CRASHES = 3


def batch_crashed(*, batch_id: str, owner: str, error: str) -> bool:
    """Count a run that ended on an unexpected error (``error``: its kind, for the user); at
    BATCH_MAX_CRASHES, fail the batch (True), with the lines it finished in its output and
    error files where those can still be written."""
    with transaction.atomic():
        batch = Batch.objects.select_for_update().filter(pk=batch_id, lease_owner=owner).first()
        if batch is None:
            return False
        batch.crashes += 1
        batch.save(update_fields=["crashes"])
    if batch.crashes < BATCH_MAX_CRASHES:
        return False
    message = f"The batch stopped on a server error {batch.crashes} times ({error})."
    try:
        finished = batch_finish(batch_id=batch_id, owner=owner, status=Status.FAILED)
    except Exception:  # writing the files is what fails: fail it without them
        logger.exception("batch %s: could not write the files of a failed batch", batch_id)
        finished = None
    if finished is None:
        batch_fail(batch_id=batch_id, owner=owner, code="server_error", message=message)
        return True
    message += " The requests it finished are in its output and error files."
    error_entry = {"code": "server_error", "message": message, "param": None, "line": None}
    Batch.objects.filter(pk=batch_id).update(errors=[error_entry])
    return True


def batch_requeue_stale() -> list[str]:
    """Send again the batches whose worker died (lease ran out) or whose task was lost."""
    now = timezone.now()
    stale = list(
        Batch.objects.filter(status__in=Batch.RUNNABLE, lease_until__lt=now).values_list(
            "pk", flat=True
        )
    )
    for batch_id in stale:
        requeued = Batch.objects.filter(pk=batch_id, lease_until__lt=now).update(
            lease_owner="", lease_until=now + QUEUED_GRACE
        )
        if requeued:
            current_app.send_task("batches.run", args=[batch_id])
    return stale
