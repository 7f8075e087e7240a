"""The served-model admin: adding registers the checkpoint (in the background, by the task
tests/controlplane/deployments/test_registration.py covers), changes and deletions go through
the services (audited, and seen by every API process's catalog)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from controlplane.audit.models import AuditEvent
from controlplane.catalog.cache import catalog_snapshot
from controlplane.deployments.models import ServedModel
from controlplane.deployments.services import ModelRegistrationError, served_model_delete
from controlplane.deployments.tasks import register_model

pytestmark = pytest.mark.django_db


@pytest.fixture
def add_model(admin_client, django_capture_on_commit_callbacks):
    """Add a model in the admin and run its registration task, as the Celery worker would."""

    def add(name: str, path) -> ServedModel:
        with django_capture_on_commit_callbacks():
            response = admin_client.post(
                reverse("admin:deployments_servedmodel_add"), {"name": name, "path": str(path)}
            )
        assert response.status_code == 302, response.content[:3000]
        model = ServedModel.objects.get(name=name)
        register_model(model.pk)
        model.refresh_from_db()
        return model

    return add


def test_adding_registers_the_checkpoint(admin_client, add_model, tiny_llama, tmp_path):
    url = reverse("admin:deployments_servedmodel_add")
    # Paths the server cannot even look at (a name too long, a home that does not exist) are
    # the same form error, not a server error.
    for path in (tmp_path / "nothing", "9" * 400, "~no-such-user-here/model"):
        response = admin_client.post(url, {"name": "broken", "path": str(path)})
        assert response.status_code == 200
        assert "is not a file or folder on the server" in response.content.decode()
    assert not ServedModel.objects.exists()

    model = add_model("tiny", tiny_llama)
    assert model.architecture == "LlamaForCausalLM" and model.num_parameters > 0
    assert "tiny" in catalog_snapshot().models
    response = admin_client.post(url, {"name": "tiny", "path": str(tiny_llama)})
    assert "already exists" in response.content.decode()


def test_deactivating_goes_through_the_service(admin_client, add_model, tiny_llama):
    model = add_model("tiny", tiny_llama)
    assert "tiny" in catalog_snapshot().models

    response = admin_client.post(
        reverse("admin:deployments_servedmodel_change", args=[model.pk]),
        # is_active unticked
        {"max_model_len": 1024, "tool_parser": "hermes", "drop_attribution_header": "on"},
    )
    assert response.status_code == 302, response.content[:3000]
    model.refresh_from_db()
    assert not model.is_active and model.max_model_len == 1024
    event = AuditEvent.objects.get(action="model.update")
    assert event.details == {"is_active": [True, False], "max_model_len": [2048, 1024]}
    assert "tiny" not in catalog_snapshot().models

    response = admin_client.post(
        reverse("admin:deployments_servedmodel_delete", args=[model.pk]), {"post": "yes"}
    )
    assert response.status_code == 302
    assert not ServedModel.objects.exists()
    assert AuditEvent.objects.filter(action="model.delete").exists()


def test_a_tenants_only_granted_model_cannot_be_deleted(
    admin_client, add_model, tiny_llama, make_tenant
):
    """An empty grant list means every model: deleting a tenant's only grant would widen it."""
    model = add_model("tiny", tiny_llama)
    tenant = make_tenant("Narrow")
    tenant.allowed_models.add(model)
    url = reverse("admin:deployments_servedmodel_delete", args=[model.pk])

    page = admin_client.get(url).content.decode()
    assert "tenant Narrow (its only granted model is tiny)" in page
    admin_client.post(url, {"post": "yes"})
    assert ServedModel.objects.filter(name="tiny").exists()
    with pytest.raises(ModelRegistrationError, match="only model granted to Narrow"):
        served_model_delete(model=model)
    assert list(tenant.allowed_models.values_list("name", flat=True)) == ["tiny"]
