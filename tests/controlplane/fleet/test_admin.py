"""The fleet admin over Django's test client: deploy from the add form, scale, edit settings,
stop and start, bad input shown as form errors, and the replica and node pages. Every write
is audited with the signed-in user."""

from __future__ import annotations

import pytest
from django.urls import reverse

from controlplane.audit.models import AuditEvent
from controlplane.deployments.models import ServedModel
from controlplane.fleet import services
from controlplane.fleet.agent_writes import node_register
from controlplane.fleet.models import Deployment, Replica
from controlplane.fleet.placement import GIB, RUNTIME_OVERHEAD_BYTES
from controlplane.fleet.selectors import replica_need
from tests.support.fleet_nodes import register_lost_node

pytestmark = pytest.mark.django_db

ADD = "admin:fleet_deployment_add"
CHANGELIST = "admin:fleet_deployment_changelist"


@pytest.fixture
def model():
    return ServedModel.objects.create(
        name="tiny", path="/nowhere", architecture="LlamaForCausalLM", num_parameters=1000
    )


def _form(model, **changes) -> dict:
    """Every field of the deployment form, as the browser posts it."""
    data = {
        "name": "tiny",
        "served_model": str(model.pk),
        "replicas": "2",
        "device": "cpu",
        "dtype": "",
        "quantization": "",
        "max_model_len": "256",
        "max_num_seqs": "",
        "kv_cache_gb": "0.25",
        "cpu_threads": "1",
        "node_selector": "{}",
        "idle_timeout_s": "600",
        # The read-only replica inline still posts its (empty) management form.
        "replicas_set-TOTAL_FORMS": "0",
        "replicas_set-INITIAL_FORMS": "0",
    }
    return data | {key: str(value) for key, value in changes.items()}


# The settings ``_form`` posts, deployed beforehand so that only what a test changes differs.
AS_IN_FORM = {"max_model_len": 256, "kv_cache_gb": 0.25, "cpu_threads": 1}


def _events(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("pk"))


def test_the_add_form_deploys_a_registered_model(admin_client, admin_user, model):
    response = admin_client.post(reverse(ADD), _form(model))
    assert response.status_code == 302, response.content.decode()[:3000]
    deployment = Deployment.objects.get(name="tiny")
    assert (deployment.replicas, deployment.max_model_len, deployment.kv_cache_gb) == (2, 256, 0.25)
    (event,) = _events("deployment.create")
    assert event.actor == admin_user and event.details["replicas"] == 2


@pytest.mark.parametrize(
    ("changes", "shown"),
    [
        ({"replicas": "-1"}, "Ensure this value is greater than or equal to 0"),
        ({"served_model": "999"}, "Select a valid choice"),
        ({"node_selector": "[1, 2]"}, "node_selector must map label names to text"),
        ({"kv_cache_gb": "0"}, "kv_cache_gb must be more than 0"),
    ],
)
def test_bad_input_is_a_form_error_and_deploys_nothing(admin_client, model, changes, shown):
    response = admin_client.post(reverse(ADD), _form(model, **changes))
    assert response.status_code == 200
    assert shown in response.content.decode()
    assert not Deployment.objects.exists()


def _embeddings_model() -> ServedModel:
    return ServedModel.objects.create(
        name="minilm", path="/nowhere", architecture="BertModel", num_parameters=1000
    )


def test_an_embeddings_model_deploys_and_reserves_no_kv_cache(admin_client):
    response = admin_client.post(reverse(ADD), _form(_embeddings_model(), name="minilm"))
    assert response.status_code == 302, response.content.decode()[:3000]
    deployment = Deployment.objects.get(name="minilm")
    # Its pooling engine keeps no KV cache: placement reserves the weights and the runtime.
    assert replica_need(deployment).memory_bytes == 1000 * 4 + RUNTIME_OVERHEAD_BYTES


def test_the_services_refusal_is_shown_as_a_form_error(admin_client):
    form = _form(_embeddings_model(), name="minilm", quantization="int8")
    response = admin_client.post(reverse(ADD), form)
    assert response.status_code == 200
    shown = "minilm is an embeddings model: quantization applies to generation models"
    assert shown in response.content.decode()
    assert not Deployment.objects.exists()


def test_changing_only_replicas_scales(admin_client, admin_user, model):
    deployment = services.deployment_deploy(name="tiny", replicas=2, **AS_IN_FORM)
    change = reverse("admin:fleet_deployment_change", args=[deployment.pk])
    response = admin_client.post(change, _form(model, replicas=5))
    assert response.status_code == 302, response.content.decode()[:3000]
    deployment.refresh_from_db()
    assert deployment.replicas == 5
    (event,) = _events("deployment.scale")
    assert event.actor == admin_user and event.details == {"replicas": [2, 5]}
    assert _events("deployment.deploy") == []  # no settings changed: engines keep running


def test_changing_settings_deploys_them(admin_client, admin_user, model):
    deployment = services.deployment_deploy(name="tiny", replicas=2, **AS_IN_FORM)
    change = reverse("admin:fleet_deployment_change", args=[deployment.pk])
    response = admin_client.post(change, _form(model, max_model_len=512))
    assert response.status_code == 302, response.content.decode()[:3000]
    deployment.refresh_from_db()
    assert deployment.max_model_len == 512
    (event,) = _events("deployment.deploy")
    assert event.actor == admin_user and event.details["max_model_len"] == 512


def _action(client, action: str, *deployments: Deployment):
    return client.post(
        reverse(CHANGELIST),
        {"action": action, "_selected_action": [str(d.pk) for d in deployments]},
        follow=True,
    )


def test_stop_remembers_the_replicas_and_start_brings_them_back(admin_client, admin_user, model):
    deployment = services.deployment_deploy(name="tiny", replicas=3)
    response = _action(admin_client, "stop", deployment)
    assert "Stopped: tiny." in response.content.decode()
    deployment.refresh_from_db()
    assert deployment.replicas == 0

    page = admin_client.get(reverse("admin:fleet_deployment_change", args=[deployment.pk]))
    assert "Start brings back 3 replica(s)" in page.content.decode()

    response = _action(admin_client, "start", deployment)
    assert "Started: tiny." in response.content.decode()
    deployment.refresh_from_db()
    assert deployment.replicas == 3
    actions = [(e.action, e.actor, e.details) for e in AuditEvent.objects.order_by("pk")][1:]
    assert actions == [
        ("deployment.stop", admin_user, {"replicas": [3, 0]}),
        ("deployment.start", admin_user, {"replicas": [0, 3]}),
    ]


def test_start_refuses_a_deployment_that_was_not_stopped(admin_client, model):
    deployment = services.deployment_deploy(name="tiny", replicas=0)
    response = _action(admin_client, "start", deployment)
    assert "was not stopped; scale it to the replicas you want" in response.content.decode()
    deployment.refresh_from_db()
    assert deployment.replicas == 0


def test_deleting_undeploys(admin_client, admin_user, model):
    deployment = services.deployment_deploy(name="tiny", replicas=1)
    delete = reverse("admin:fleet_deployment_delete", args=[deployment.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 302
    assert not Deployment.objects.exists()
    (event,) = _events("deployment.undeploy")
    assert event.actor == admin_user


def test_replicas_show_their_node_engine_restarts_reason_and_log(admin_client, model, redis_client):
    node = node_register(redis_client, name="gpu-host-1", ttl_s=30, memory_bytes=64 * GIB)
    deployment = services.deployment_deploy(name="tiny", replicas=1)
    Replica.objects.create(
        deployment=deployment,
        node=node,
        engine_id="tiny-gpu-host-1-7",
        state=Replica.State.FAILED,
        restarts=3,
        reason="engine exited with code 1",
        log_tail="Traceback (most recent call last):\n  <b>not markup</b>",
    )
    page = admin_client.get(reverse("admin:fleet_deployment_change", args=[deployment.pk]))
    html = page.content.decode()
    for shown in ("gpu-host-1", "tiny-gpu-host-1-7", "Failed", "engine exited with code 1"):
        assert shown in html
    assert '<pre class="log-tail">Traceback (most recent call last):\n  &lt;b&gt;' in html

    listing = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert "0/1" in listing and "1 failed" in listing


def test_nodes_show_resources_liveness_and_what_runs_there(admin_client, model, redis_client):
    live = node_register(
        redis_client,
        name="host-a",
        ttl_s=30,
        num_cpus=16,
        memory_bytes=64 * GIB,
        gpus=[{"name": "NVIDIA H100", "memory_bytes": 80 * GIB}] * 2,
        labels={"zone": "eu-1"},
    )
    register_lost_node(redis_client, name="host-b", memory_bytes=8 * GIB)
    deployment = services.deployment_deploy(name="tiny", replicas=1)
    Replica.objects.create(deployment=deployment, node=live, state=Replica.State.READY)
    Replica.objects.create(deployment=deployment, node=live, state=Replica.State.STOPPED)

    listing = admin_client.get(reverse("admin:fleet_node_changelist")).content.decode()
    rows = {
        name: listing.split(f">{name}<", 1)[1].split("</tr>", 1)[0] for name in ("host-a", "host-b")
    }
    assert "yes" in rows["host-a"] and "no" in rows["host-b"]  # host-b's heartbeat expired
    for shown in ("16", "64.0 GiB", "2 x NVIDIA H100 (80 GiB)", "zone=eu-1", "tiny (ready)"):
        assert shown in rows["host-a"]

    detail = admin_client.get(reverse("admin:fleet_node_change", args=[live.pk])).content.decode()
    assert "Replicas running here" in detail and "Ready" in detail and "Stopped" not in detail
    assert admin_client.get(reverse("admin:fleet_node_add")).status_code == 403


def test_deploy_again_retires_failed_replicas_so_they_are_tried_afresh(
    admin_client, admin_user, model
):
    deployment = services.deployment_deploy(name="tiny", replicas=1, **AS_IN_FORM)
    failed = Replica.objects.create(deployment=deployment, state=Replica.State.FAILED)
    response = _action(admin_client, "deploy_again", deployment)
    assert "Deployed again: tiny." in response.content.decode()
    failed.refresh_from_db()
    assert (failed.state, failed.reason) == ("stopped", "retired by a new deploy")
    (event,) = _events("deployment.deploy")
    assert event.actor == admin_user and event.details["retired_failed"] == 1
    assert event.details["max_model_len"] == 256  # deployed with the settings it had


def test_restart_rolls_the_replicas_onto_a_new_generation(admin_client, admin_user, model):
    deployment = services.deployment_deploy(name="tiny", replicas=2, **AS_IN_FORM)
    before = deployment.generation
    response = _action(admin_client, "restart", deployment)
    assert "Restarting, one replica at a time: tiny." in response.content.decode()
    deployment.refresh_from_db()
    assert (deployment.generation, deployment.replicas) == (before + 1, 2)
    (event,) = _events("deployment.restart")
    assert event.actor == admin_user


def test_the_list_offers_to_deploy_each_ready_model_no_deployment_runs(admin_client, model):
    services.deployment_deploy(name="tiny", replicas=1, **AS_IN_FORM)
    minilm = _embeddings_model()
    ServedModel.objects.create(  # still registering: nothing to deploy yet
        name="coming", path="/nowhere", architecture="LlamaForCausalLM", state="registering"
    )
    page = admin_client.get(reverse(CHANGELIST)).content.decode()
    link = f"{reverse(ADD)}?name=minilm&amp;served_model={minilm.pk}"
    assert f'<a href="{link}">deploy minilm</a>' in page
    assert "deploy tiny" not in page and "deploy coming" not in page
    # The link opens the add form filled in for that model.
    form = admin_client.get(f"{reverse(ADD)}?name=minilm&served_model={minilm.pk}")
    assert form.context["adminform"].form.initial == {
        "name": "minilm",
        "served_model": str(minilm.pk),
    }
