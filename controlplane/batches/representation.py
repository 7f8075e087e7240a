"""Files and batches as the OpenAI API shows them (openai.types.FileObject and Batch)."""

from __future__ import annotations

from datetime import datetime

from controlplane.batches.models import Batch, StoredFile


def _ts(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp())


def file_object(stored: StoredFile) -> dict:
    return {
        "id": stored.id,
        "object": "file",
        "bytes": stored.bytes,
        "created_at": _ts(stored.created_at),
        "filename": stored.filename,
        "purpose": stored.purpose,
        "status": "processed",
        "expires_at": None,
        "status_details": None,
    }


def batch_object(batch: Batch) -> dict:
    return {
        "id": batch.id,
        "object": "batch",
        "endpoint": batch.endpoint,
        "errors": {"object": "list", "data": batch.errors} if batch.errors else None,
        "input_file_id": batch.input_file_id_text,
        "completion_window": batch.completion_window,
        "status": batch.status,
        "output_file_id": batch.output_file_id,
        "error_file_id": batch.error_file_id,
        "created_at": _ts(batch.created_at),
        "in_progress_at": _ts(batch.in_progress_at),
        "expires_at": _ts(batch.expires_at),
        "finalizing_at": _ts(batch.finalizing_at),
        "completed_at": _ts(batch.completed_at),
        "failed_at": _ts(batch.failed_at),
        "expired_at": _ts(batch.expired_at),
        "cancelling_at": _ts(batch.cancelling_at),
        "cancelled_at": _ts(batch.cancelled_at),
        "request_counts": {
            "total": batch.total,
            "completed": batch.completed,
            "failed": batch.failed,
        },
        "metadata": batch.metadata,
    }
