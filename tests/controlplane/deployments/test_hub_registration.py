"""Registering a Hugging Face hub id: the task downloads it with huggingface_hub from
HF_ENDPOINT with HF_TOKEN, recording the bytes as they come, then validates it. No hub is
reachable here, so a local mirror (tests/support/hub_mirror.py) serves the tiny checkpoint as
``org/tiny``, requiring a token."""

from __future__ import annotations

import socket

import pytest
from django.core.management import call_command

from controlplane.catalog.cache import catalog_snapshot
from controlplane.deployments import registration
from controlplane.deployments.models import ServedModel
from controlplane.deployments.services import ModelRegistrationError, served_model_register
from controlplane.deployments.tasks import register_model
from tests.support.hub_mirror import HubMirror

pytestmark = pytest.mark.django_db

TOKEN = "hf_mirror_secret"


@pytest.fixture
def hub(tiny_llama, settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"
    settings.HF_TOKEN = TOKEN
    with HubMirror({"org/tiny": tiny_llama}, token=TOKEN) as mirror:
        settings.HF_ENDPOINT = mirror.url
        yield mirror


def _register(capture, source: str, name: str = "tiny") -> ServedModel:
    """Register ``source`` as the admin does, then run the queued task as the worker does."""
    with capture() as queued:
        model = registration.served_model_request_registration(source=source, name=name)
    assert len(queued) == 1 and model.state == ServedModel.State.REGISTERING
    state = register_model(model.pk)
    model.refresh_from_db()
    assert model.state == state
    return model


def test_a_hub_id_is_downloaded_with_progress_and_ends_ready(
    hub, tiny_llama, settings, recorded, django_capture_on_commit_callbacks
):
    model = _register(django_capture_on_commit_callbacks, "org/tiny")
    assert model.state == ServedModel.State.READY, model.failure_reason
    commit = hub.commit("org/tiny")
    target = settings.VAR_DIR / "models" / "hub" / "org--tiny" / commit
    assert model.path == str(target) and model.source == "org/tiny"
    assert model.architecture == "LlamaForCausalLM" and "tiny" in catalog_snapshot().models
    for file in hub.files("org/tiny"):
        assert (target / file.name).read_bytes() == file.read_bytes()

    # The row showed the download as it went: the stage, then the bytes up to the total.
    total = sum(f.stat().st_size for f in hub.files("org/tiny"))
    files = len(hub.files("org/tiny"))
    stages = [w["stage"] for w in recorded if "stage" in w]
    assert stages[:3] == [
        f"asking {hub.url} for org/tiny",
        f"downloading into {target}",
        f"downloading {files} files ({total / 2**20:.1f} MiB)",
    ]
    counts = [(w["progress_done"], w["progress_total"]) for w in recorded if "stage" not in w]
    assert counts[0] == (0, total) and counts[-1] == (total, total)
    done = [d for d, _ in counts]
    assert done == sorted(done) and any(0 < d < total for d in done)
    assert ("GET", "/api/models/org/tiny/revision/main") in hub.requests


def test_a_revision_is_honoured(hub, django_capture_on_commit_callbacks):
    commit = hub.commit("org/tiny")
    model = _register(django_capture_on_commit_callbacks, f"org/tiny@{commit}")
    assert model.state == ServedModel.State.READY, model.failure_reason
    assert ("GET", f"/api/models/org/tiny/revision/{commit}") in hub.requests

    model = _register(django_capture_on_commit_callbacks, "org/tiny@v9", "v9")
    assert model.state == ServedModel.State.FAILED
    assert model.failure_reason == f"org/tiny on {hub.url} has no revision 'v9'"


def test_a_wrong_token_fails_with_a_reason_that_says_so(
    hub, settings, django_capture_on_commit_callbacks
):
    settings.HF_TOKEN = "hf_someone_else"
    model = _register(django_capture_on_commit_callbacks, "org/tiny")
    assert model.state == ServedModel.State.FAILED
    assert model.failure_reason == (
        f"{hub.url} refused the token (HTTP 401, invalid credentials): check HF_TOKEN"
    )
    assert not (settings.VAR_DIR / "models" / "hub").exists()


def test_no_token_for_a_gated_repo_fails_saying_it_is_gated(
    hub, settings, django_capture_on_commit_callbacks
):
    settings.HF_TOKEN = ""
    model = _register(django_capture_on_commit_callbacks, "org/tiny")
    assert model.state == ServedModel.State.FAILED
    assert model.failure_reason.startswith(f"org/tiny on {hub.url} is gated")
    assert "HF_TOKEN is not set" in model.failure_reason


def test_an_unknown_repo_fails_as_not_found(hub, django_capture_on_commit_callbacks):
    model = _register(django_capture_on_commit_callbacks, "org/missing")
    assert model.state == ServedModel.State.FAILED
    assert model.failure_reason.startswith(f"org/missing on {hub.url} was not found (HTTP 404)")


def test_an_unreachable_endpoint_fails_as_a_network_error(
    settings, tmp_path, django_capture_on_commit_callbacks
):
    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings.VAR_DIR = tmp_path / "var"
    settings.HF_ENDPOINT = f"http://127.0.0.1:{port}"
    model = _register(django_capture_on_commit_callbacks, "org/tiny")
    assert model.state == ServedModel.State.FAILED
    assert model.failure_reason.startswith(f"could not reach http://127.0.0.1:{port} (")
    assert "set HF_ENDPOINT to a mirror" in model.failure_reason


def test_load_model_registers_a_hub_id_too(hub, capsys):
    call_command("load_model", "org/tiny", "--name", "tiny")
    out = capsys.readouterr().out
    assert f"asking {hub.url} for org/tiny" in out and "Registered 'tiny'" in out
    assert ServedModel.objects.get(name="tiny").is_ready
    with pytest.raises(ModelRegistrationError, match="was not found"):
        served_model_register(path="org/missing", name="missing")
