"""The adapter admin: upload (again, to update), see validation state and reason and whether
live engines serve it, grant, delete, via services."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from controlplane.adapters import selectors, serving
from controlplane.adapters.models import Adapter
from controlplane.adapters.services import ADAPTER_FILES
from controlplane.adapters.tasks import validate_adapter
from controlplane.deployments.models import ServedModel
from engine import protocol
from engine.lora.validation import adapter_checksum
from engine.tooling.random_lora import make_random_adapter
from tests.support.engine_status import publish_engine_status

pytestmark = pytest.mark.django_db


def _files(directory):
    return {
        "config_file": SimpleUploadedFile(
            "adapter_config.json", (Path(directory) / "adapter_config.json").read_bytes()
        ),
        "weights_file": SimpleUploadedFile(
            "adapter_model.safetensors",
            (Path(directory) / "adapter_model.safetensors").read_bytes(),
        ),
    }


def test_upload_validate_grant_and_delete_in_the_admin(
    staff_client, base_model, adapter_dir, make_tenant, django_capture_on_commit_callbacks
):
    tenant_a, tenant_b = make_tenant("A"), make_tenant("B")
    with django_capture_on_commit_callbacks() as queued:
        response = staff_client.post(
            reverse("admin:adapters_adapter_add"),
            {"name": "support-bot", "base_model": base_model.pk, **_files(adapter_dir)},
        )
    assert response.status_code == 302, response.content[:3000]
    adapter = Adapter.objects.get(name="support-bot")
    assert adapter.state == Adapter.State.UPLOADED and adapter.stored_by_platform
    assert queued, "the upload queues validation"

    validate_adapter(adapter.pk)  # what the Celery worker runs
    adapter.refresh_from_db()
    change_url = reverse("admin:adapters_adapter_change", args=[adapter.pk])
    page = staff_client.get(change_url).content.decode()
    assert adapter.state == Adapter.State.READY
    assert adapter.checksum in page and "q_proj" in page

    response = staff_client.post(change_url, {"tenants": [tenant_a.pk]})
    assert response.status_code == 302, response.content[:3000]
    assert [r.name for r in selectors.adapters_visible_to(tenant_id=tenant_a.pk)] == ["support-bot"]
    assert selectors.adapters_visible_to(tenant_id=tenant_b.pk) == []

    response = staff_client.post(
        reverse("admin:adapters_adapter_delete", args=[adapter.pk]), {"post": "yes"}
    )
    assert response.status_code == 302
    assert not Adapter.objects.exists()


def test_failed_validation_shows_its_reason(staff_client, base_model, wrong_shape_dir):
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        for name in ADAPTER_FILES:
            zf.write(Path(wrong_shape_dir) / name, name)
    response = staff_client.post(
        reverse("admin:adapters_adapter_add"),
        {
            "name": "wide",
            "base_model": base_model.pk,
            "archive": SimpleUploadedFile("wide.zip", archive.getvalue()),
        },
    )
    assert response.status_code == 302, response.content[:3000]
    adapter = Adapter.objects.get(name="wide")
    validate_adapter(adapter.pk)
    listing = staff_client.get(reverse("admin:adapters_adapter_changelist")).content.decode()
    assert "failed" in listing
    assert "layer 0 q_proj.lora_A has shape [8, 96], expected [8, 64]" in listing


def test_add_form_needs_exactly_one_source(staff_client, base_model, adapter_dir):
    url = reverse("admin:adapters_adapter_add")
    response = staff_client.post(url, {"name": "x", "base_model": base_model.pk})
    assert response.status_code == 200
    assert "Give the adapter one way" in response.content.decode()
    response = staff_client.post(
        url,
        {
            "name": "x",
            "base_model": base_model.pk,
            "server_path": str(adapter_dir),
            **_files(adapter_dir),
        },
    )
    assert "Give the adapter one way" in response.content.decode()
    assert not Adapter.objects.exists()

    response = staff_client.post(
        url, {"name": "on-disk", "base_model": base_model.pk, "server_path": str(adapter_dir)}
    )
    assert response.status_code == 302
    adapter = Adapter.objects.get(name="on-disk")
    assert not adapter.stored_by_platform and Path(adapter.path) == Path(adapter_dir).resolve()


def test_what_registration_refuses_is_an_error_on_the_form_not_a_server_error(
    staff_client, base_model, tmp_path
):
    url = reverse("admin:adapters_adapter_add")
    refused = {
        "server_path": [str(tmp_path / "nowhere"), "9" * 400],  # no directory; a name too long
        "archive": [SimpleUploadedFile("a.zip", b"not a zip")],
    }
    for field, values in refused.items():
        for value in values:
            body = {"name": "x", "base_model": base_model.pk, field: value}
            response = staff_client.post(url, body)
            assert response.status_code == 200, (field, value)
            page = response.content.decode()
            assert "errornote" in page and ("directory" in page or "zip" in page)
    assert not Adapter.objects.exists()


def test_the_list_shows_ready_only_when_a_live_engine_serves_it(
    staff_client, base_model, adapter_dir, redis_client, settings
):
    staff_client.post(
        reverse("admin:adapters_adapter_add"),
        {"name": "bot", "base_model": base_model.pk, "server_path": str(adapter_dir)},
    )
    adapter = Adapter.objects.get(name="bot")
    validate_adapter(adapter.pk)
    adapter.refresh_from_db()
    listing_url = reverse("admin:adapters_adapter_changelist")
    change_url = reverse("admin:adapters_adapter_change", args=[adapter.pk])
    for url in (listing_url, change_url):
        page = staff_client.get(url).content.decode()
        assert "validated; not loaded by any live engine yet" in page
        assert "serving on" not in page

    # A live engine of another version, then of this one (its status record says so).
    status = {"prefix": settings.PLATFORM_REDIS_PREFIX, "model": "tiny-llama"}
    publish_engine_status(redis_client, adapters={"bot": "an-older-version"}, **status)
    serving.forget_cached_statuses()
    assert "serving on" not in staff_client.get(listing_url).content.decode()
    publish_engine_status(redis_client, adapters={"bot": adapter.checksum}, **status)
    serving.forget_cached_statuses()
    for url in (listing_url, change_url):
        assert "ready: serving on 1 engine" in staff_client.get(url).content.decode()

    redis_client.delete(
        protocol.Keys(settings.PLATFORM_REDIS_PREFIX).status("tiny-llama", "fake-engine")
    )
    serving.forget_cached_statuses()  # the status key expired: the engine is gone
    assert "validated; not loaded" in staff_client.get(listing_url).content.decode()


def test_uploading_under_an_existing_name_updates_the_adapter(
    staff_client, base_model, adapter_dir, tiny_llama, tmp_path
):
    url = reverse("admin:adapters_adapter_add")
    staff_client.post(url, {"name": "bot", "base_model": base_model.pk, **_files(adapter_dir)})
    first = Adapter.objects.get(name="bot")
    validate_adapter(first.pk)
    first.refresh_from_db()

    newer = make_random_adapter(tiny_llama, tmp_path / "newer", rank=4, seed=5)
    response = staff_client.post(url, {"name": "bot", "base_model": base_model.pk, **_files(newer)})
    assert response.status_code == 302, response.content[:3000]
    again = Adapter.objects.get(name="bot")
    assert again.pk == first.pk and again.state == Adapter.State.UPLOADED
    validate_adapter(again.pk)
    again.refresh_from_db()
    assert again.checksum == adapter_checksum(newer) != first.checksum

    other = ServedModel.objects.create(name="other", path=str(tiny_llama), architecture="x")
    response = staff_client.post(url, {"name": "bot", "base_model": other.pk, **_files(newer)})
    assert response.status_code == 200
    assert "registered on base model" in response.content.decode()


def test_the_base_model_list_offers_generation_models_only(staff_client, base_model, tmp_path):
    minilm = tmp_path / "minilm"
    minilm.mkdir()
    (minilm / "modules.json").write_text("[]")  # a sentence-transformers checkpoint
    embeddings = ServedModel.objects.create(
        name="minilm", path=str(minilm), architecture="BertModel"
    )
    page = staff_client.get(reverse("admin:adapters_adapter_add")).content.decode()
    assert f'<option value="{base_model.pk}">' in page
    assert f'<option value="{embeddings.pk}">' not in page


def test_an_adapter_granted_to_no_tenant_warns_and_staff_can_still_try_it(
    staff_client, base_model, adapter_dir, make_tenant, django_capture_on_commit_callbacks
):
    from controlplane.tenants.services import tenant_get_or_create_playground

    customer = make_tenant("Customer")
    with django_capture_on_commit_callbacks():
        response = staff_client.post(
            reverse("admin:adapters_adapter_add"),
            {"name": "nobody-bot", "base_model": base_model.pk, **_files(adapter_dir)},
            follow=True,
        )
    assert "is granted to no tenant" in response.content.decode()
    adapter = Adapter.objects.get(name="nobody-bot")
    validate_adapter(adapter.pk)
    staff = response.wsgi_request.user
    playground = tenant_get_or_create_playground(user=staff)
    assert selectors.adapter_route_for(tenant_id=customer.pk, name="nobody-bot") is None
    assert selectors.adapter_route_for(tenant_id=playground.pk, name="nobody-bot") is not None
    granted = {route.name: ids for route, ids in selectors.adapter_routes_granted().items()}
    assert granted["nobody-bot"] == {playground.pk}  # what the API processes cache
