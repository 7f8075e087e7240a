"""A batch whose run keeps stopping on an unexpected error is failed after a few runs, with
the lines it finished in its files, instead of being sent again every lease forever (a batch
input line nested 5,000 deep once kept a batch in "validating" so, retried every 40 s). An
outage of the database or Redis is not such an error: the batch waits it out."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
import redis
from django.utils import timezone

from controlplane.batches import services
from controlplane.batches.models import Batch
from inference.batches import runner
from tests.support.batch_files import chat_line, jsonl, upload

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def batch(make_tenant) -> Batch:
    tenant = make_tenant()
    stored = services.file_create(
        tenant_id=tenant.pk,
        upload=upload(jsonl([chat_line("a"), chat_line("b")])),
        filename="in.jsonl",
        purpose="batch",
    )
    return services.batch_create(
        tenant_id=tenant.pk,
        api_key_id=None,
        input_file_id=stored.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )


def _run_after_the_lease_ran_out(batch_id: str) -> str:
    Batch.objects.filter(pk=batch_id).update(lease_until=timezone.now() - timedelta(seconds=1))
    return asyncio.run(runner.BatchRun(batch_id).run())


def _fail_counting_with(monkeypatch, error: Exception) -> None:
    def count_lines(batch):
        raise error

    monkeypatch.setattr(runner, "count_lines", count_lines)


def test_a_run_that_keeps_failing_fails_the_batch_on_the_third_time(batch, monkeypatch):
    _fail_counting_with(monkeypatch, RecursionError("deep"))
    for _ in range(services.BATCH_MAX_CRASHES - 1):
        with pytest.raises(RecursionError):  # the task fails; beat sends it again
            _run_after_the_lease_ran_out(batch.id)
        assert Batch.objects.get(pk=batch.pk).status == "validating"
    assert _run_after_the_lease_ran_out(batch.id) == "failed"
    failed = Batch.objects.get(pk=batch.pk)
    assert (failed.status, failed.errors[0]["code"]) == ("failed", "server_error")
    assert "3 times (RecursionError)" in failed.errors[0]["message"]
    assert failed.failed_at is not None and failed.lease_owner == ""
    assert _run_after_the_lease_ran_out(batch.id) == "not claimed"  # never sent again


def test_a_failed_run_keeps_the_lines_it_finished(batch, monkeypatch):
    services.batch_claim(batch_id=batch.id, owner="w1")
    services.batch_start(batch_id=batch.id, owner="w1", total=2)
    services.batch_record_results(batch_id=batch.id, results=[(1, True, '{"n": 1}')])
    Batch.objects.filter(pk=batch.pk).update(crashes=services.BATCH_MAX_CRASHES - 1)
    assert services.batch_crashed(batch_id=batch.id, owner="w1", error="KeyError")
    failed = Batch.objects.get(pk=batch.pk)
    assert failed.status == "failed" and "in its output" in failed.errors[0]["message"]
    with services.file_open(failed.output_file) as f:
        assert [json.loads(line) for line in f.read().splitlines()] == [{"n": 1}]


def test_an_outage_is_waited_out_not_counted(batch, monkeypatch):
    _fail_counting_with(monkeypatch, redis.ConnectionError("Redis is away"))
    for _ in range(services.BATCH_MAX_CRASHES + 1):
        with pytest.raises(redis.ConnectionError):
            _run_after_the_lease_ran_out(batch.id)
    kept = Batch.objects.get(pk=batch.pk)
    assert (kept.status, kept.crashes) == ("validating", 0)
