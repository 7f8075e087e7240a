"""The batch admin: every tenant's batches with status, progress and counts, links that download
their files, and a cancel action that goes through the same service as the API."""

from __future__ import annotations

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse

from controlplane.batches import services
from controlplane.batches.models import Batch
from tests.support.batch_files import chat_line, jsonl, upload

pytestmark = pytest.mark.django_db


@pytest.fixture
def running_batch(make_tenant):
    tenant = make_tenant(name="Acme")
    content = jsonl([chat_line("a"), chat_line("b")])
    stored = services.file_create(
        tenant_id=tenant.pk, upload=upload(content), filename="in.jsonl", purpose="batch"
    )
    batch = services.batch_create(
        tenant_id=tenant.pk,
        api_key_id=None,
        input_file_id=stored.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    services.batch_claim(batch_id=batch.id, owner="worker-1")
    services.batch_start(batch_id=batch.id, owner="worker-1", total=2)
    services.batch_record_results(batch_id=batch.id, results=[(1, True, "{}")])
    services.batch_renew(batch_id=batch.id, owner="worker-1")
    return batch, stored, content


def test_the_list_shows_tenant_status_and_progress_and_the_page_downloads_files(
    staff_client, running_batch
):
    batch, stored, content = running_batch
    page = staff_client.get(reverse("admin:batches_batch_changelist")).content.decode()
    row = next(r for r in page.split("<tr") if batch.id in r)
    assert "Acme" in row and "In Progress" in row and "1/2" in row
    # The batch's own link, as a user would click it: the admin quotes the id in its URLs
    # ("batch_" + hex may read as one of its escapes, such as "_23" for "#").
    detail = staff_client.get(reverse("admin:batches_batch_change", args=[quote(batch.id)]))
    assert detail.status_code == 200
    download = reverse("admin:batches_storedfile_download", args=[stored.id])
    assert download in detail.content.decode()
    response = staff_client.get(download)
    assert b"".join(response.streaming_content) == content


def test_the_cancel_action_asks_the_batch_to_stop(staff_client, running_batch):
    batch, _, _ = running_batch
    staff_client.post(
        reverse("admin:batches_batch_changelist"),
        {"action": "cancel", "_selected_action": [batch.id]},
    )
    assert Batch.objects.get(pk=batch.id).status == "cancelling"
