"""Moving queued usage events from Redis into UsageRecord rows and daily rollups, each
record priced when it is written (the model's price in effect when the request finished)."""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import UTC, datetime

from django.db import transaction
from django.db.models import F

from controlplane.billing.costs import request_cost_units
from controlplane.billing.selectors import PriceBook, price_book
from controlplane.common.redis_clients import redis_key, sync_redis
from controlplane.tenants.models import ApiKey, Tenant
from controlplane.tenants.services import api_key_flush_last_used
from controlplane.usage.budgets import spend_after_write
from controlplane.usage.events import UsageEvent, usage_processing_key, usage_queue_key
from controlplane.usage.models import DailyUsage, UsageRecord
from controlplane.usage.selectors import unwritten_usage_events
from controlplane.usage.spool import take_orphaned

logger = logging.getLogger(__name__)

BATCH_SIZE = 1000


def _record(event: UsageEvent, known_keys: set[int], prices: PriceBook) -> UsageRecord:
    created_at = datetime.fromtimestamp(event.finished_at, tz=UTC)
    prompt_tokens = max(0, event.prompt_tokens)
    completion_tokens = max(0, event.completion_tokens)
    cached_tokens = max(0, event.cached_tokens)
    cost_units = request_cost_units(
        prices.at(event.model, created_at),
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cached_tokens=cached_tokens,
    )
    return UsageRecord(
        created_at=created_at,
        request_id=event.request_id[:64],
        tenant_id=event.tenant_id,
        api_key_id=event.key_id if event.key_id in known_keys else None,
        key_prefix=event.key_prefix,
        model=event.model,
        adapter=event.adapter,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cached_tokens=cached_tokens,
        cost_units=cost_units,
        time_to_first_token=event.time_to_first_token,
        latency=event.latency,
        status=event.status,
        finish_reason=event.finish_reason,
        event_id=event.event_id[:64] or None,
        batch_id=event.batch_id[:64],
        end_user=event.end_user[:256],
    )


def _roll_up(records: list[UsageRecord]) -> None:
    totals: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0, 0])
    for r in records:
        group = (r.created_at.date(), r.tenant_id, r.key_prefix, r.model, r.adapter)
        t = totals[group]
        t[0] += 1
        t[1] += r.status >= 400
        t[2] += r.prompt_tokens
        t[3] += r.completion_tokens
        t[4] += r.cached_tokens
        t[5] += r.cost_units
    for (date, tenant_id, prefix, model, adapter), t in totals.items():
        row, _ = DailyUsage.objects.select_for_update().get_or_create(
            date=date, tenant_id=tenant_id, key_prefix=prefix, model=model, adapter=adapter
        )
        DailyUsage.objects.filter(pk=row.pk).update(
            num_requests=F("num_requests") + t[0],
            num_errors=F("num_errors") + t[1],
            prompt_tokens=F("prompt_tokens") + t[2],
            completion_tokens=F("completion_tokens") + t[3],
            cached_tokens=F("cached_tokens") + t[4],
            cost_units=F("cost_units") + t[5],
        )


def _write_batch(raw_events: list[bytes]) -> int:
    # Event ids the database already holds are left out: that makes the flush exactly-once.
    events = unwritten_usage_events(raw_events)
    tenant_ids = set(
        Tenant.objects.filter(pk__in={e.tenant_id for e in events}).values_list("pk", flat=True)
    )
    events = [e for e in events if e.tenant_id in tenant_ids]  # deleted tenants: nothing to bill
    known_keys = set(
        ApiKey.objects.filter(pk__in={e.key_id for e in events if e.key_id}).values_list(
            "pk", flat=True
        )
    )
    prices = price_book(models={e.model for e in events})
    records = [_record(e, known_keys, prices) for e in events]
    with transaction.atomic():
        UsageRecord.objects.bulk_create(records)
        _roll_up(records)
        spend_after_write(records)
    return len(records)


# Moves up to ARGV[1] events from the queue's head to the processing list, atomically, and
# returns them: an event is always in exactly one of the two lists.
_TAKE_LUA = """
local items = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #items > 0 then
  redis.call('RPUSH', KEYS[2], unpack(items))
  redis.call('LTRIM', KEYS[1], #items, -1)
end
return items
"""


def usage_flush(*, max_batches: int = 100) -> int:
    """Drain the usage queue into the database; returns how many records were written.

    One flusher at a time (a Redis lock). A batch moves from the queue to a processing list
    in one step, is written, then the processing list is deleted; a flush that crashed
    midway left its batch there, and the next one writes it first. Event ids already in the
    database are skipped, so nothing is written twice and nothing is lost (exactly-once).
    Spools of API processes that died while Redis was away are written too.
    """
    client = sync_redis()
    lock = client.lock(redis_key("usage", "flush_lock"), timeout=120, blocking=False)
    if not lock.acquire():
        return 0
    processing = usage_processing_key()
    take = client.register_script(_TAKE_LUA)
    written = 0
    try:
        written += take_orphaned(_write_batch)
        leftover = client.lrange(processing, 0, -1)
        if leftover:
            written += _write_batch(leftover)
            client.delete(processing)
        for _ in range(max_batches):
            batch = take(keys=[usage_queue_key(), processing], args=[BATCH_SIZE])
            if not batch:
                break
            written += _write_batch(batch)
            client.delete(processing)
        api_key_flush_last_used()
    finally:
        lock.release()
    if written:
        logger.info("usage flush wrote %d records", written)
    return written
