"""Usage is written exactly once: spooled while Redis is away, replayed when it is back, and
never written twice by a flush that crashed or an event pushed twice (issue 15.4)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys

import pytest
from asgiref.sync import sync_to_async

from controlplane.access import admission as admission_policy
from controlplane.launcher.redis_server import free_port
from controlplane.usage import services
from controlplane.usage.events import UsageEvent, encode_event, new_event_id, usage_queue_key
from controlplane.usage.models import DailyUsage, UsageRecord
from controlplane.usage.services import usage_flush
from controlplane.usage.spool import spool, spool_dir
from inference import credentials
from tests.controlplane.usage.finished_requests import usage_event

pytestmark = pytest.mark.django_db(transaction=True)


def _event(tenant_id: int, *, completion: int = 1, event_id: str | None = None) -> UsageEvent:
    return usage_event(
        finished_at=1.8e9,
        tenant_id=tenant_id,
        completion_tokens=completion,
        event_id=event_id or new_event_id(),
    )


async def _finish(admission, completion: int) -> None:
    await admission_policy.finish(
        admission,
        prompt_tokens=5,
        completion_tokens=completion,
        cached_tokens=0,
        status=200,
        finish_reason="stop",
        time_to_first_token=0.01,
        latency=0.1,
    )
    await admission_policy.finish_pending()


async def test_usage_finished_while_redis_is_away_is_spooled_then_replayed(
    settings, make_tenant, make_key, redis_client
):
    tenant = await sync_to_async(make_tenant)("Spooled")  # unlimited: admit needs no Redis
    _key, secret = await sync_to_async(make_key)(tenant)
    principal = await credentials.authenticate(f"Bearer {secret}", endpoint="completions")
    first = await admission_policy.admit(principal, model="m", prompt_tokens=5, max_tokens=9)
    second = await admission_policy.admit(principal, model="m", prompt_tokens=5, max_tokens=9)

    up = settings.REDIS_URL
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    await _finish(first, completion=7)  # must not raise, must not lose the event
    spooled = spool.path.read_bytes().splitlines()
    assert len(spooled) == 1 and b'"completion_tokens":7' in spooled[0]
    assert redis_client.llen(usage_queue_key()) == 0

    settings.REDIS_URL = up  # Redis is back: the next push replays the spool too
    await _finish(second, completion=4)
    assert not spool.path.exists()
    assert redis_client.llen(usage_queue_key()) == 2
    assert await sync_to_async(usage_flush)() == 2
    tokens = sorted([r.completion_tokens async for r in UsageRecord.objects.filter(tenant=tenant)])
    assert tokens == [4, 7]


def test_a_replay_that_finds_redis_gone_again_keeps_the_spool_and_logs_one_line(
    settings, make_tenant, caplog
):
    tenant = make_tenant("Replayed")
    spool.append(encode_event(_event(tenant.pk, completion=3)))
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # Redis went away again
    with caplog.at_level(logging.WARNING, logger="controlplane.access.admission"):
        admission_policy._replay_spool()
    assert len(spool.path.read_bytes().splitlines()) == 1  # kept for the next replay
    (record,) = caplog.records
    assert "not replayed yet" in record.getMessage() and record.exc_info is None


def test_a_flush_that_crashed_after_its_commit_is_finished_without_duplicates(
    make_tenant, redis_client, monkeypatch
):
    tenant = make_tenant("Crashy")
    for i in range(5):
        redis_client.rpush(usage_queue_key(), encode_event(_event(tenant.pk, completion=i)))
    real_write = services._write_batch

    def write_then_crash(raw_events):
        real_write(raw_events)  # committed...
        raise RuntimeError("worker killed before the batch left Redis")

    monkeypatch.setattr(services, "_write_batch", write_then_crash)
    with pytest.raises(RuntimeError):
        usage_flush()
    monkeypatch.setattr(services, "_write_batch", real_write)
    # Nothing is in the queue any more: the batch waits in the processing list.
    assert redis_client.llen(usage_queue_key()) == 0
    redis_client.rpush(usage_queue_key(), encode_event(_event(tenant.pk, completion=10)))

    assert usage_flush() == 1  # only the new one: the crashed batch was already written
    records = UsageRecord.objects.filter(tenant=tenant)
    assert sorted(records.values_list("completion_tokens", flat=True)) == [0, 1, 2, 3, 4, 10]
    assert DailyUsage.objects.get(tenant=tenant).num_requests == 6
    assert usage_flush() == 0


def test_an_event_pushed_twice_is_written_once(make_tenant, redis_client):
    tenant = make_tenant("Twice")
    event = encode_event(_event(tenant.pk, completion=3))
    redis_client.rpush(usage_queue_key(), event, event)  # one batch
    assert usage_flush() == 1
    redis_client.rpush(usage_queue_key(), event)  # a later replay of the same event
    assert usage_flush() == 0
    assert UsageRecord.objects.filter(tenant=tenant).count() == 1
    assert DailyUsage.objects.get(tenant=tenant).completion_tokens == 3


def test_the_spool_of_a_process_that_died_is_written_by_the_flush(make_tenant, redis_client):
    tenant = make_tenant("Orphan")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    pid = int(dead.stdout)  # that process has exited
    directory = spool_dir()
    directory.mkdir(parents=True)
    orphan = directory / f"{socket.gethostname()}-{pid}.jsonl"
    orphan.write_bytes(encode_event(_event(tenant.pk, completion=8)) + b"\n")
    alive = directory / f"{socket.gethostname()}-{os.getpid()}.jsonl"  # this process: not touched
    alive.write_bytes(encode_event(_event(tenant.pk, completion=9)) + b"\n")

    assert usage_flush() == 1
    assert not orphan.exists() and alive.exists()
    assert list(
        UsageRecord.objects.filter(tenant=tenant).values_list("completion_tokens", flat=True)
    ) == [8]
