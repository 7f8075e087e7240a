"""Reads on usage. Every tenant-facing read takes the tenant: no query spans tenants by accident."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta

import msgspec
from django.db.models import QuerySet, Sum

from controlplane.common.redis_clients import sync_redis
from controlplane.tenants.models import Tenant
from controlplane.usage.events import (
    UsageEvent,
    decode_event,
    usage_processing_key,
    usage_queue_key,
)
from controlplane.usage.models import DailyUsage, UsageRecord

logger = logging.getLogger(__name__)

# As many queued events as a read looks at: the newest, what the dashboard's charts show.
PENDING_READ_LIMIT = 5000


def usage_records_for_tenant(*, tenant_id: int, since: datetime | None = None) -> QuerySet:
    qs = UsageRecord.objects.filter(tenant_id=tenant_id)
    return qs.filter(created_at__gte=since) if since else qs


def daily_usage_for_tenant(*, tenant_id: int, since: date | None = None) -> QuerySet:
    qs = DailyUsage.objects.filter(tenant_id=tenant_id)
    return qs.filter(date__gte=since) if since else qs


def unwritten_usage_events(raw_events: list[bytes]) -> list[UsageEvent]:
    """Decoded events, each event id once, leaving out ids the database already holds (a
    replayed spool, a flush that crashed after its commit, one that committed a moment ago)."""
    events: dict[str, UsageEvent] = {}
    anonymous: list[UsageEvent] = []  # events queued before event ids existed
    for raw in raw_events:
        try:
            event = decode_event(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            logger.warning("dropping a malformed usage event: %r", raw[:200])
            continue
        if event.event_id:
            events.setdefault(event.event_id[:64], event)
        else:
            anonymous.append(event)
    seen = set(
        UsageRecord.objects.filter(event_id__in=list(events)).values_list("event_id", flat=True)
    )
    return [e for i, e in events.items() if i not in seen] + anonymous


def pending_usage_events(*, limit: int = PENDING_READ_LIMIT) -> list[UsageEvent]:
    """Usage queued in Redis that no flush has written yet, read without taking it: the batch
    a flush is writing now and the newest ``limit`` events of the queue."""
    with sync_redis().pipeline(transaction=True) as pipe:  # one snapshot of both lists
        pipe.lrange(usage_processing_key(), 0, -1)
        pipe.lrange(usage_queue_key(), -limit, -1)
        processing, queued = pipe.execute()
    return unwritten_usage_events(processing + queued)


def _pending_tokens(pending: Sequence[UsageEvent], names: dict[int, str]):
    """(finished at, tenant name, tokens) of each pending event of a tenant that still exists
    (the flush drops the others)."""
    for event in pending:
        if event.tenant_id in names:
            finished_at = datetime.fromtimestamp(event.finished_at, tz=UTC)
            tokens = max(0, event.prompt_tokens) + max(0, event.completion_tokens)
            yield finished_at, names[event.tenant_id], tokens


def tokens_per_minute_by_tenant(
    *, minutes: int = 60, now: datetime | None = None, pending: Sequence[UsageEvent] = ()
) -> dict:
    """For the dashboard: ``{"minutes": [iso...], "series": {tenant: [tokens per minute...]}}``,
    from the usage records and the ``pending`` events not written yet.

    Buckets are computed in Python from the last hour's records (bounded), which keeps the
    query portable across SQLite and PostgreSQL.
    """
    now = (now or datetime.now(UTC)).replace(second=0, microsecond=0)
    start = now - timedelta(minutes=minutes - 1)
    names = dict(Tenant.objects.values_list("pk", "name"))
    rows = UsageRecord.objects.filter(created_at__gte=start).values_list(
        "created_at", "tenant_id", "prompt_tokens", "completion_tokens"
    )
    written = (
        (created_at, names.get(tenant_id, str(tenant_id)), prompt + completion)
        for created_at, tenant_id, prompt, completion in rows.iterator()
    )
    series: dict[str, list[int]] = {}
    for finished_at, name, tokens in (*written, *_pending_tokens(pending, names)):
        index = int((finished_at - start).total_seconds() // 60)
        if 0 <= index < minutes:
            series.setdefault(name, [0] * minutes)[index] += tokens
    return {
        "minutes": [(start + timedelta(minutes=i)).isoformat() for i in range(minutes)],
        "series": series,
    }


def daily_tokens_by_tenant(
    *, days: int = 14, today: date | None = None, pending: Sequence[UsageEvent] = ()
) -> dict:
    """For the dashboard: ``{"days": [iso...], "series": {tenant: [tokens per day...]}}``, from
    the daily rollups and the ``pending`` events not rolled up yet (by UTC day, as the flush
    rolls them up)."""
    today = today or datetime.now(UTC).date()
    start = today - timedelta(days=days - 1)
    rows = (
        DailyUsage.objects.filter(date__gte=start)
        .values("date", "tenant__name")
        .annotate(prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"))
    )
    rolled_up = (
        (row["date"], row["tenant__name"], (row["prompt"] or 0) + (row["completion"] or 0))
        for row in rows
    )
    names = dict(Tenant.objects.values_list("pk", "name")) if pending else {}
    not_rolled_up = (
        (finished_at.date(), name, tokens)
        for finished_at, name, tokens in _pending_tokens(pending, names)
    )
    series: dict[str, list[int]] = {}
    for day, name, tokens in (*rolled_up, *not_rolled_up):
        index = (day - start).days
        if 0 <= index < days:
            series.setdefault(name, [0] * days)[index] += tokens
    return {
        "days": [(start + timedelta(days=i)).isoformat() for i in range(days)],
        "series": series,
    }
