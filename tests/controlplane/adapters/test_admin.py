"""The adapter admin: upload, see validation state and reason, grant, delete, via services."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from controlplane.adapters import selectors
from controlplane.adapters.models import Adapter
from controlplane.adapters.services import ADAPTER_FILES
from controlplane.adapters.tasks import validate_adapter

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123456")
    client.force_login(user)
    return client


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
