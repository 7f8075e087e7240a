"""Registering from the admin: the request saves the model ``registering`` and queues a Celery
task; the task (run here as the worker runs it) converts and validates the checkpoint and ends
the row ready or failed with the reason. Until ready it is neither served nor deployable."""

from __future__ import annotations

import pytest
from django.urls import reverse

from controlplane.catalog.cache import catalog_snapshot
from controlplane.deployments.models import ServedModel
from controlplane.deployments.tasks import register_model
from controlplane.fleet.services import DeploymentError, deployment_deploy
from tests.support.tiny_gguf import write_gguf

pytestmark = pytest.mark.django_db

ADD = "admin:deployments_servedmodel_add"
LIST = "admin:deployments_servedmodel_changelist"


@pytest.fixture
def var_dir(settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"
    return settings.VAR_DIR


def _add(admin_client, django_capture_on_commit_callbacks, name: str, source: str):
    with django_capture_on_commit_callbacks() as queued:
        response = admin_client.post(reverse(ADD), {"name": name, "path": source})
    assert response.status_code == 302, response.content[:3000]
    return ServedModel.objects.get(name=name), queued


def test_the_request_queues_the_work_and_the_task_makes_it_ready(
    admin_client, tiny_llama, django_capture_on_commit_callbacks
):
    model, queued = _add(admin_client, django_capture_on_commit_callbacks, "tiny", str(tiny_llama))
    # The request came back before any validation: nothing is known of the checkpoint yet.
    assert model.state == ServedModel.State.REGISTERING and model.architecture == ""
    assert len(queued) == 1, "the registration task is queued once the row commits"
    assert "tiny" not in catalog_snapshot().models
    with pytest.raises(DeploymentError, match="tiny is registering, not ready"):
        deployment_deploy(name="tiny", replicas=1)
    listing = admin_client.get(reverse(LIST)).content.decode()
    assert "registering: queued" in listing and 'http-equiv="refresh"' in listing

    assert register_model(model.pk) == "ready"  # what the Celery worker runs
    model.refresh_from_db()
    assert model.architecture == "LlamaForCausalLM" and model.num_parameters > 0
    assert model.path == str(tiny_llama) and model.source == str(tiny_llama)
    assert "tiny" in catalog_snapshot().models
    deployment_deploy(name="tiny", replicas=1)
    page = admin_client.get(reverse("admin:deployments_servedmodel_change", args=[model.pk]))
    assert 'class="registration-ready"' in page.content.decode()
    assert 'http-equiv="refresh"' not in page.content.decode()


def test_a_broken_checkpoint_ends_failed_with_its_reason_and_can_be_retried(
    admin_client, tiny_llama, tmp_path, django_capture_on_commit_callbacks
):
    empty = tmp_path / "empty"
    empty.mkdir()
    model, _ = _add(admin_client, django_capture_on_commit_callbacks, "broken", str(empty))
    assert register_model(model.pk) == "failed"
    model.refresh_from_db()
    assert "config.json" in model.failure_reason
    listing = admin_client.get(reverse(LIST)).content.decode()
    assert f"failed: {model.failure_reason}" in listing
    with pytest.raises(DeploymentError, match="broken is failed, not ready"):
        deployment_deploy(name="broken", replicas=1)

    # The operator puts the checkpoint in place and registers it again.
    for file in tiny_llama.iterdir():
        (empty / file.name).symlink_to(file)
    with django_capture_on_commit_callbacks() as queued:
        response = admin_client.post(
            reverse(LIST), {"action": "register_again", "_selected_action": [model.pk]}
        )
    assert response.status_code == 302 and len(queued) == 1
    model.refresh_from_db()
    assert model.state == ServedModel.State.REGISTERING and model.failure_reason == ""
    assert register_model(model.pk) == "ready"


def test_the_form_refuses_at_once_what_is_neither_a_path_nor_a_hub_id(admin_client, tiny_llama):
    response = admin_client.post(reverse(ADD), {"name": "x", "path": "/no/such/checkpoint"})
    assert response.status_code == 200
    assert "is not a file or folder on the server, nor a Hugging Face hub id" in (
        response.content.decode().replace("&#x27;", "'")
    )
    response = admin_client.post(reverse(ADD), {"name": "has space", "path": str(tiny_llama)})
    assert "model name" in response.content.decode() and "is invalid" in response.content.decode()
    assert not ServedModel.objects.exists()


def test_a_gguf_file_is_converted_by_the_task(
    admin_client, tiny_llama, tmp_path, var_dir, recorded, django_capture_on_commit_callbacks
):
    gguf_file = write_gguf(tiny_llama, tmp_path / "tiny.gguf", "llama")
    model, _ = _add(admin_client, django_capture_on_commit_callbacks, "tiny-gguf", str(gguf_file))
    assert not (var_dir / "models" / "gguf").exists()  # the request converted nothing

    assert register_model(model.pk) == "ready"
    model.refresh_from_db()
    [converted] = (var_dir / "models" / "gguf").iterdir()
    assert model.path == str(converted) and model.source == str(gguf_file)
    assert model.architecture == "LlamaForCausalLM" and not model.completions_only
    stages = [w["stage"] for w in recorded if "stage" in w]
    assert stages[0] == f"converting tiny.gguf to a safetensors checkpoint in {converted}"
    assert "rendering the chat template" in stages


def test_a_redelivered_task_leaves_a_finished_registration_alone(
    admin_client, tiny_llama, django_capture_on_commit_callbacks
):
    model, _ = _add(admin_client, django_capture_on_commit_callbacks, "tiny", str(tiny_llama))
    assert register_model(model.pk) == "ready"
    # acks_late: a worker that died after the work may see the task again.
    assert register_model(model.pk) is None
    model.delete()
    assert register_model(model.pk) is None
