"""Usage: queued by finish() without touching the database, written in batches by usage_flush."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from controlplane.tenants.models import ApiKey
from controlplane.usage.events import usage_queue_key
from controlplane.usage.models import DailyUsage, UsageRecord
from controlplane.usage.selectors import (
    daily_tokens_by_tenant,
    daily_usage_for_tenant,
    tokens_per_minute_by_tenant,
    usage_records_for_tenant,
)
from controlplane.usage.services import usage_flush
from tests.controlplane.usage.finished_requests import finish_request

pytestmark = pytest.mark.django_db(transaction=True)


async def _request(secret, *, prompt, completion, status=200, adapter=None):
    await finish_request(
        secret, prompt=prompt, completion=completion, status=status, adapter=adapter
    )


async def test_finish_queues_and_flush_writes_records_rollups_and_last_use(
    make_tenant, make_key, redis_client
):
    tenant = await sync_to_async(make_tenant)("Acme", tokens_per_minute=10_000)
    key, secret = await sync_to_async(make_key)(tenant)
    await _request(secret, prompt=10, completion=5)
    await _request(secret, prompt=20, completion=7, adapter="sql-lora")
    await _request(secret, prompt=4, completion=0, status=500)
    # Nothing reached the database yet: the request path only queued events in Redis.
    assert await UsageRecord.objects.acount() == 0
    assert redis_client.llen(usage_queue_key()) == 3

    assert await sync_to_async(usage_flush)() == 3
    assert redis_client.llen(usage_queue_key()) == 0
    records = [r async for r in UsageRecord.objects.order_by("created_at")]
    assert [(r.prompt_tokens, r.completion_tokens, r.cached_tokens) for r in records] == [
        (10, 5, 5),
        (20, 7, 10),
        (4, 0, 2),
    ]
    assert records[1].adapter == "sql-lora"
    assert {r.api_key_id for r in records} == {key.pk}
    assert records[0].finish_reason == "length" and records[0].time_to_first_token == 0.05

    plain = await DailyUsage.objects.aget(tenant=tenant, adapter="")
    assert (plain.num_requests, plain.num_errors, plain.prompt_tokens) == (2, 1, 14)
    assert (await ApiKey.objects.aget(pk=key.pk)).last_used_at is not None

    # A second flush adds to the same rollup row.
    await _request(secret, prompt=1, completion=1)
    await sync_to_async(usage_flush)()
    plain = await DailyUsage.objects.aget(tenant=tenant, adapter="")
    assert plain.num_requests == 3


async def test_usage_reads_are_scoped_to_one_tenant(make_tenant, make_key, redis_client):
    a = await sync_to_async(make_tenant)("A")
    b = await sync_to_async(make_tenant)("B")
    _, secret_a = await sync_to_async(make_key)(a)
    _, secret_b = await sync_to_async(make_key)(b)
    await _request(secret_a, prompt=10, completion=1)
    await _request(secret_b, prompt=99, completion=1)
    await sync_to_async(usage_flush)()

    def reads():
        return (
            list(usage_records_for_tenant(tenant_id=a.pk).values_list("prompt_tokens", flat=True)),
            list(daily_usage_for_tenant(tenant_id=a.pk).values_list("prompt_tokens", flat=True)),
            tokens_per_minute_by_tenant(minutes=5),
            daily_tokens_by_tenant(days=2),
        )

    records, daily, per_minute, per_day = await sync_to_async(reads)()
    assert records == [10] and daily == [10]
    assert sum(per_minute["series"]["A"]) == 11 and sum(per_minute["series"]["B"]) == 100
    assert per_day["series"]["A"][-1] == 11


def test_malformed_events_are_dropped_not_fatal(redis_client, make_tenant):
    redis_client.rpush(usage_queue_key(), b"not json")
    assert usage_flush() == 0
    assert redis_client.llen(usage_queue_key()) == 0


def test_celery_task_and_command_drain_the_queue(redis_client, make_tenant):
    from io import StringIO

    from django.core.management import call_command

    from controlplane.usage.events import UsageEvent, encode_event
    from controlplane.usage.tasks import flush_usage

    tenant = make_tenant("Queued")

    def queue(n):
        for i in range(n):
            event = UsageEvent(
                finished_at=1.8e9,
                request_id=f"r{i}",
                tenant_id=tenant.pk,
                key_id=0,
                key_prefix="session",
                model="m",
                adapter="",
                prompt_tokens=1,
                completion_tokens=1,
                cached_tokens=0,
                time_to_first_token=None,
                latency=0.1,
                status=200,
                finish_reason="stop",
            )
            redis_client.rpush(usage_queue_key(), encode_event(event))

    queue(3)
    assert flush_usage.apply().get() == 3
    queue(2)
    out = StringIO()
    call_command("flush_usage", stdout=out)
    assert "wrote 2 usage records" in out.getvalue()
    assert UsageRecord.objects.filter(tenant=tenant).count() == 5
