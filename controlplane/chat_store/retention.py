"""Retention of what clients asked the platform to keep: stored responses and stored chat
completions older than ``STORED_OBJECT_RETENTION_DAYS`` are deleted (hourly, by beat)."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from controlplane.chat_store.models import StoredChatCompletion
from controlplane.responses.models import StoredResponse

logger = logging.getLogger(__name__)


def purge_expired(days: int | None = None) -> int:
    """Delete stored objects created more than ``days`` ago (the setting if None; 0 keeps
    everything). Returns how many were deleted."""
    days = settings.STORED_OBJECT_RETENTION_DAYS if days is None else days
    if days <= 0:
        return 0
    cutoff = timezone.now() - timedelta(days=days)
    deleted = 0
    for model in (StoredResponse, StoredChatCompletion):
        count, _ = model.objects.filter(created_at__lt=cutoff).delete()
        deleted += count
    if deleted:
        logger.info("Deleted %d stored objects older than %d days", deleted, days)
    return deleted
