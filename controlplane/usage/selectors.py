"""Reads on usage. Every tenant-facing read takes the tenant: no query spans tenants by accident."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from django.db.models import QuerySet, Sum

from controlplane.tenants.models import Tenant
from controlplane.usage.models import DailyUsage, UsageRecord


def usage_records_for_tenant(*, tenant_id: int, since: datetime | None = None) -> QuerySet:
    qs = UsageRecord.objects.filter(tenant_id=tenant_id)
    return qs.filter(created_at__gte=since) if since else qs


def daily_usage_for_tenant(*, tenant_id: int, since: date | None = None) -> QuerySet:
    qs = DailyUsage.objects.filter(tenant_id=tenant_id)
    return qs.filter(date__gte=since) if since else qs


def tokens_per_minute_by_tenant(*, minutes: int = 60, now: datetime | None = None) -> dict:
    """For the dashboard: ``{"minutes": [iso...], "series": {tenant: [tokens per minute...]}}``.

    Buckets are computed in Python from the last hour's records (bounded), which keeps the
    query portable across SQLite and PostgreSQL.
    """
    now = (now or datetime.now(UTC)).replace(second=0, microsecond=0)
    start = now - timedelta(minutes=minutes - 1)
    names = dict(Tenant.objects.values_list("pk", "name"))
    series: dict[str, list[int]] = {}
    rows = UsageRecord.objects.filter(created_at__gte=start).values_list(
        "created_at", "tenant_id", "prompt_tokens", "completion_tokens"
    )
    for created_at, tenant_id, prompt, completion in rows.iterator():
        index = int((created_at - start).total_seconds() // 60)
        if 0 <= index < minutes:
            name = names.get(tenant_id, str(tenant_id))
            series.setdefault(name, [0] * minutes)[index] += prompt + completion
    return {
        "minutes": [(start + timedelta(minutes=i)).isoformat() for i in range(minutes)],
        "series": series,
    }


def daily_tokens_by_tenant(*, days: int = 14, today: date | None = None) -> dict:
    """For the dashboard: ``{"days": [iso...], "series": {tenant: [tokens per day...]}}``."""
    today = today or datetime.now(UTC).date()
    start = today - timedelta(days=days - 1)
    rows = (
        DailyUsage.objects.filter(date__gte=start)
        .values("date", "tenant__name")
        .annotate(prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"))
    )
    series: dict[str, list[int]] = {}
    for row in rows:
        index = (row["date"] - start).days
        if 0 <= index < days:
            totals = series.setdefault(row["tenant__name"], [0] * days)
            totals[index] += (row["prompt"] or 0) + (row["completion"] or 0)
    return {
        "days": [(start + timedelta(days=i)).isoformat() for i in range(days)],
        "series": series,
    }
