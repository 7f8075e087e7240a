"""Message batches as Anthropic shows them, through the services and the worker's lifecycle
calls: what is checked when one is made, and how an expired batch splits its requests into
succeeded, errored and expired, counts and result lines alike."""

from __future__ import annotations

import json

import pytest

from controlplane.batches import message_batches, services
from controlplane.batches.result_lines import error_line, response_line
from controlplane.batches.storage import file_storage
from controlplane.common.api_error import ApiError

pytestmark = pytest.mark.django_db


def _request(custom_id: str) -> dict:
    return {"custom_id": custom_id, "params": {"model": "tiny", "max_tokens": 2, "messages": []}}


@pytest.mark.parametrize(
    ("requests", "param"),
    [
        ([], "requests"),
        ([{"custom_id": "has space", "params": {}}], "requests[0].custom_id"),
        ([_request("a"), _request("a")], "requests[1].custom_id"),
        ([{"custom_id": "x" * 65, "params": {}}], "requests[0].custom_id"),
        ([{"custom_id": "a", "params": "hi"}], "requests[0].params"),
    ],
)
def test_a_batch_is_checked_whole_before_anything_is_kept(make_tenant, requests, param):
    tenant = make_tenant()
    with pytest.raises(ApiError) as refused:
        message_batches.message_batch_create(
            tenant_id=tenant.pk, api_key_id=None, requests=requests
        )
    assert refused.value.param == param
    assert not tenant.batches.exists() and not tenant.files.exists()


def test_an_expired_batch_tells_expired_requests_from_failed_ones(
    make_tenant, django_capture_on_commit_callbacks
):
    tenant = make_tenant()
    batch = message_batches.message_batch_create(
        tenant_id=tenant.pk,
        api_key_id=None,
        requests=[_request("ok"), _request("bad"), _request("late")],
    )
    assert services.batch_claim(batch_id=batch.id, owner="w") is not None
    services.batch_start(batch_id=batch.id, owner="w", total=3)
    message = {"type": "message", "content": [{"type": "text", "text": "Hi"}]}
    refused = {"error": {"message": "max_tokens is too large", "type": "invalid_request_error"}}
    services.batch_record_results(
        batch_id=batch.id,
        results=[
            (1, True, response_line("ok", status_code=200, request_id="r1", body=message)),
            (2, False, response_line("bad", status_code=400, request_id="r2", body=refused)),
            (3, False, error_line("late", code="batch_expired", message="too late")),
        ],
    )
    ended = services.batch_finish(batch_id=batch.id, owner="w", status="expired")

    shown = message_batches.message_batch_object(ended, results_url="http://x/results")
    assert shown["processing_status"] == "ended" and shown["results_url"] == "http://x/results"
    assert shown["request_counts"] == {
        "processing": 0,
        "succeeded": 1,
        "errored": 1,
        "canceled": 0,
        "expired": 1,
    }
    lines = message_batches.message_batch_results(ended)
    # A DELETE landing as the results stream removes the rows and files: the lines still come.
    with django_capture_on_commit_callbacks(execute=True):  # the files' removal from storage
        message_batches.message_batch_delete(tenant_id=tenant.pk, batch_id=batch.id)
    assert not file_storage().exists(ended.output_file.storage_name)
    results = {line["custom_id"]: line["result"] for line in map(json.loads, lines)}
    assert results["ok"] == {"type": "succeeded", "message": message}
    assert results["bad"]["error"]["error"] == {
        "type": "invalid_request_error",
        "message": "max_tokens is too large",
    }
    assert results["late"] == {"type": "expired"}
