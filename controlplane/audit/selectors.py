"""Reads on the audit log."""

from __future__ import annotations

from django.db import models
from django.db.models import QuerySet

from controlplane.audit.models import AuditEvent


def audit_events_for(*, target: models.Model) -> QuerySet[AuditEvent]:
    return AuditEvent.objects.filter(target_type=target._meta.label_lower, target_id=str(target.pk))


def audit_events_recent(*, limit: int = 50) -> list[AuditEvent]:
    return list(AuditEvent.objects.select_related("actor")[:limit])
