"""Files a tenant uploaded (or a batch wrote) and Batch API jobs, with their per-line results."""

from __future__ import annotations

import secrets

from django.db import models
from django.utils import timezone


def new_file_id() -> str:
    return f"file-{secrets.token_hex(12)}"


def new_batch_id() -> str:
    return f"batch_{secrets.token_hex(12)}"


# Anthropic's Message Batches API keeps its batches here too, told apart by this id prefix.
MESSAGE_BATCH_PREFIX = "msgbatch_"


def new_message_batch_id() -> str:
    return f"{MESSAGE_BATCH_PREFIX}{secrets.token_hex(12)}"


class StoredFile(models.Model):
    """An OpenAI file object; its bytes live in the ``batch_files`` storage under ``storage_name``."""

    # "message_batch": the requests of a Message Batches API batch, written by the server
    # (never uploaded, never listed).
    PURPOSES = ("batch", "batch_output", "message_batch")

    id = models.CharField(primary_key=True, max_length=40, default=new_file_id, editable=False)
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="files")
    filename = models.CharField(max_length=255)
    purpose = models.CharField(max_length=32, choices=[(p, p) for p in PURPOSES])
    bytes = models.PositiveBigIntegerField(default=0)
    storage_name = models.CharField(max_length=500, editable=False)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "file"

    def __str__(self) -> str:
        return f"{self.id} ({self.filename})"


class Batch(models.Model):
    """One Batch API job: its input file, where it stands, and its output and error files."""

    class Status(models.TextChoices):
        VALIDATING = "validating"
        FAILED = "failed"
        IN_PROGRESS = "in_progress"
        FINALIZING = "finalizing"
        COMPLETED = "completed"
        EXPIRED = "expired"
        CANCELLING = "cancelling"
        CANCELLED = "cancelled"

    # A worker runs a batch only in these states; the others are final (or nearly: finalizing).
    RUNNABLE = (Status.VALIDATING, Status.IN_PROGRESS, Status.CANCELLING, Status.FINALIZING)
    FINAL = (Status.FAILED, Status.COMPLETED, Status.EXPIRED, Status.CANCELLED)

    id = models.CharField(primary_key=True, max_length=40, default=new_batch_id, editable=False)
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="batches")
    # The key that created it: its lines run under it (scopes, limits, usage by key).
    api_key = models.ForeignKey(
        "tenants.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    endpoint = models.CharField(max_length=64)
    completion_window = models.CharField(max_length=16, default="24h")
    input_file = models.ForeignKey(
        StoredFile, null=True, on_delete=models.SET_NULL, related_name="input_of"
    )
    input_file_id_text = models.CharField(max_length=40)  # kept after the file is deleted
    output_file = models.ForeignKey(
        StoredFile, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    error_file = models.ForeignKey(
        StoredFile, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.VALIDATING, db_index=True
    )
    metadata = models.JSONField(null=True, blank=True)
    errors = models.JSONField(null=True, blank=True)  # whole-batch errors: [{code, message, ...}]
    total = models.PositiveIntegerField(default=0)
    completed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    # Which worker runs it, until when: a worker that died stops renewing, and beat re-queues.
    # Runs that ended on an unexpected error (not an outage, not a dead worker): a batch that
    # keeps failing the same way is failed after BATCH_MAX_CRASHES, not sent again forever.
    crashes = models.PositiveSmallIntegerField(default=0)
    lease_owner = models.CharField(max_length=64, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    expires_at = models.DateTimeField()
    in_progress_at = models.DateTimeField(null=True, blank=True)
    finalizing_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    cancelling_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "batches"

    def __str__(self) -> str:
        return self.id

    @property
    def done(self) -> int:
        return self.completed + self.failed


class BatchResult(models.Model):
    """The result of one input line, written as soon as it is known. The unique line number is
    what makes a resumed batch skip finished lines and write each line once."""

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="results")
    line = models.PositiveIntegerField()  # 1-based line number in the input file
    ok = models.BooleanField()  # True: the output file; False: the error file
    record = models.TextField()  # the output or error file's JSON line, without the newline

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["batch", "line"], name="batch_result_line_once")
        ]
