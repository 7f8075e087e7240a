"""/v1/files and /v1/batches refuse bad bodies with OpenAI's error body, naming the field, in
the words the API has always used (the serializers read the fields, the services judge the
values)."""

from __future__ import annotations

import pytest

from controlplane.batches import services
from controlplane.batches.representation import batch_object, file_object
from inference.schemas.batches import BatchObjectSerializer
from inference.schemas.files import FileObjectSerializer
from tests.support.batch_files import chat_line, jsonl, upload

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def auth(make_tenant, make_key) -> dict[str, str]:
    _key, secret = make_key(make_tenant("Acme"))
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def _error(response, status: int = 400) -> tuple[str, str | None]:
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    return error["message"], error["param"]


def test_an_upload_without_its_file_or_purpose_names_what_is_missing(client, auth):
    content = jsonl([chat_line("a")])
    missing_file = client.post("/v1/files", {"purpose": "batch"}, **auth)
    assert _error(missing_file) == ("Send the file as the multipart field `file`.", "file")
    for data in ({"file": upload(content)}, {"file": upload(content), "purpose": ""}):
        missing_purpose = client.post("/v1/files", data, **auth)
        assert _error(missing_purpose) == ("Give the file's `purpose` (`batch`).", "purpose")
    other = client.post("/v1/files", {"file": upload(content), "purpose": "fine-tune"}, **auth)
    assert _error(other) == (
        "Unsupported purpose 'fine-tune': this server stores files for `batch` only.",
        "purpose",
    )


def test_a_batch_needs_its_three_strings_and_values_the_server_runs(client, auth):
    stored = client.post(
        "/v1/files", {"file": upload(jsonl([chat_line("a")])), "purpose": "batch"}, **auth
    ).json()
    good = {
        "input_file_id": stored["id"],
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
    }

    def create(**changes):
        body = {k: v for k, v in {**good, **changes}.items() if v is not ...}
        return client.post("/v1/batches", body, content_type="application/json", **auth)

    for name in good:
        for bad in (..., None, "", 7):
            message = f"`{name}` is required (a string)."
            assert _error(create(**{name: bad})) == (message, name), (name, bad)
    assert _error(create(endpoint="/v1/nope")) == (
        "Unsupported endpoint '/v1/nope'; batches run /v1/chat/completions, /v1/completions, "
        "/v1/embeddings, /v1/responses.",
        "endpoint",
    )
    assert _error(create(completion_window="1h")) == (
        "completion_window must be `24h`.",
        "completion_window",
    )
    assert _error(create(metadata={"k": 1})) == (
        "metadata keys are strings of at most 64 characters and values strings of at most 512.",
        "metadata",
    )
    created = create(metadata={"job": "eval"})
    assert created.status_code == 200 and created.json()["metadata"] == {"job": "eval"}


def test_the_schema_serializers_describe_the_objects_the_views_render(make_tenant):
    tenant = make_tenant()
    stored = services.file_create(
        tenant_id=tenant.pk,
        upload=upload(jsonl([chat_line("a")])),
        filename="in.jsonl",
        purpose="batch",
    )
    batch = services.batch_create(
        tenant_id=tenant.pk,
        api_key_id=None,
        input_file_id=stored.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    assert set(file_object(stored)) == set(FileObjectSerializer().fields)
    assert set(batch_object(batch)) == set(BatchObjectSerializer().fields)
