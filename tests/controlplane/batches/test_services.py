"""Files and batches through their services: tenant scoping, validation of what a user sends,
the worker lease, results written once per line, and output files in the input's order."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.batches import selectors, services
from controlplane.batches.models import Batch
from controlplane.common.api_error import ApiError
from tests.support.batch_files import chat_line, jsonl, upload

pytestmark = pytest.mark.django_db


@pytest.fixture
def tenant_file(make_tenant):
    tenant = make_tenant()
    content = jsonl([chat_line("a"), chat_line("b")])
    stored = services.file_create(
        tenant_id=tenant.pk, upload=upload(content), filename="in.jsonl", purpose="batch"
    )
    return tenant, stored, content


def _batch(tenant, stored, **overrides) -> Batch:
    options = {"endpoint": "/v1/chat/completions", "completion_window": "24h"}
    options.update(overrides)
    return services.batch_create(
        tenant_id=tenant.pk, api_key_id=None, input_file_id=stored.id, **options
    )


def test_an_uploaded_file_is_stored_whole_and_only_its_tenant_finds_it(tenant_file, make_tenant):
    tenant, stored, content = tenant_file
    assert stored.id.startswith("file-") and stored.bytes == len(content)
    with services.file_open(selectors.file_get(tenant_id=tenant.pk, file_id=stored.id)) as f:
        assert f.read() == content
    other = make_tenant()
    with pytest.raises(ApiError) as refused:
        selectors.file_get(tenant_id=other.pk, file_id=stored.id)
    assert refused.value.status == 404
    assert (
        selectors.file_list(tenant_id=other.pk, purpose=None, after=None, limit=10, ascending=False)
        == []
    )


def test_uploads_of_another_purpose_empty_or_too_big_are_refused(make_tenant, settings):
    tenant = make_tenant()
    settings.FILES_MAX_UPLOAD_BYTES = 10
    cases = [(b"x", "fine-tune", 400), (b"", "batch", 400), (b"x" * 11, "batch", 413)]
    for content, purpose, status in cases:
        with pytest.raises(ApiError) as refused:
            services.file_create(
                tenant_id=tenant.pk, upload=upload(content), filename="f", purpose=purpose
            )
        assert refused.value.status == status


def test_batch_creation_checks_endpoint_window_metadata_and_the_file(tenant_file, make_tenant):
    tenant, stored, _ = tenant_file
    bad = [
        {"endpoint": "/v1/moderations"},
        {"completion_window": "1h"},
        {"metadata": {"k": 1}},
        {"metadata": {str(i): "v" for i in range(17)}},
    ]
    for overrides in bad:
        with pytest.raises(ApiError) as refused:
            _batch(tenant, stored, **overrides)
        assert refused.value.status == 400, overrides
    with pytest.raises(ApiError) as refused:
        _batch(make_tenant(), stored)
    assert refused.value.status == 404
    batch = _batch(tenant, stored, metadata={"run": "nightly"})
    assert batch.status == "validating" and batch.id.startswith("batch_")
    assert batch.expires_at - batch.created_at == timedelta(hours=24)


def test_the_input_of_an_unfinished_batch_cannot_be_deleted(tenant_file):
    tenant, stored, _ = tenant_file
    batch = _batch(tenant, stored)
    with pytest.raises(ApiError) as refused:
        services.file_delete(tenant_id=tenant.pk, file_id=stored.id)
    assert refused.value.status == 409
    Batch.objects.filter(pk=batch.pk).update(status="completed")
    services.file_delete(tenant_id=tenant.pk, file_id=stored.id)
    with pytest.raises(ApiError):
        selectors.file_get(tenant_id=tenant.pk, file_id=stored.id)


def test_a_batch_no_worker_holds_is_cancelled_at_once_a_running_one_is_asked_to_stop(tenant_file):
    tenant, stored, _ = tenant_file
    queued = _batch(tenant, stored)
    assert services.batch_cancel(tenant_id=tenant.pk, batch_id=queued.id).status == "cancelled"
    running = _batch(tenant, stored)
    assert services.batch_claim(batch_id=running.id, owner="w1") is not None
    cancelling = services.batch_cancel(tenant_id=tenant.pk, batch_id=running.id)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at is not None
    Batch.objects.filter(pk=running.pk).update(status="completed")
    with pytest.raises(ApiError) as refused:
        services.batch_cancel(tenant_id=tenant.pk, batch_id=running.id)
    assert refused.value.status == 409


def test_a_live_lease_keeps_other_workers_out_until_it_runs_out(tenant_file):
    tenant, stored, _ = tenant_file
    batch = _batch(tenant, stored)
    assert services.batch_claim(batch_id=batch.id, owner="w1") is not None
    assert services.batch_claim(batch_id=batch.id, owner="w2") is None
    assert services.batch_requeue_stale() == []
    Batch.objects.filter(pk=batch.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    assert services.batch_requeue_stale() == [batch.id]
    assert services.batch_claim(batch_id=batch.id, owner="w2") is not None
    assert services.batch_renew(batch_id=batch.id, owner="w1") is None  # w1 lost it


def test_each_line_is_written_once_and_the_files_follow_the_input_order(tenant_file):
    tenant, stored, _ = tenant_file
    batch = _batch(tenant, stored)
    services.batch_claim(batch_id=batch.id, owner="w1")
    services.batch_start(batch_id=batch.id, owner="w1", total=3)
    services.batch_record_results(batch_id=batch.id, results=[(3, True, '{"n":3}')])
    # A resumed run writes line 3 again: the first result stands.
    services.batch_record_results(
        batch_id=batch.id, results=[(1, True, '{"n":1}'), (3, True, '{"again":3}')]
    )
    services.batch_record_results(batch_id=batch.id, results=[(2, False, '{"n":2}')])
    assert selectors.batch_done_lines(batch_id=batch.id) == {1, 2, 3}
    done = services.batch_finish(batch_id=batch.id, owner="w1", status="completed")
    assert (done.status, done.completed, done.failed, done.total) == ("completed", 2, 1, 3)
    with services.file_open(done.output_file) as f:
        assert [json.loads(line) for line in f.read().splitlines()] == [{"n": 1}, {"n": 3}]
    with services.file_open(done.error_file) as f:
        assert f.read() == b'{"n":2}\n'
    assert done.output_file.tenant_id == tenant.pk and done.output_file.purpose == "batch_output"
