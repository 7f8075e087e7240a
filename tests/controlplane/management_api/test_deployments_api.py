"""The management API over HTTP (Django's test client): each endpoint, who may call it, and bad
input answered with a 400 in OpenAI's error body that names the parameter."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from controlplane.audit.models import AuditEvent
from controlplane.deployments.models import ServedModel
from controlplane.fleet import services
from controlplane.fleet.agent_writes import node_register
from controlplane.fleet.models import Deployment, Replica
from controlplane.fleet.placement import GIB
from controlplane.tenants.services import api_key_create, tenant_get_or_create_playground
from tests.support.fleet_nodes import register_lost_node

pytestmark = pytest.mark.django_db


@pytest.fixture
def model():
    return ServedModel.objects.create(
        name="tiny", path="/nowhere", architecture="LlamaForCausalLM", num_parameters=1000
    )


@pytest.fixture
def admin_key(admin_user, redis_client) -> str:
    tenant = tenant_get_or_create_playground(user=admin_user)
    created = api_key_create(tenant=tenant, name="deployer", scopes=["admin"])
    return created.secret


class Api:
    def __init__(self, client, secret: str | None):
        self.client = client
        self.headers = {"Authorization": f"Bearer {secret}"} if secret else {}

    def __call__(self, method: str, path: str, body: dict | None = None):
        call = getattr(self.client, method)
        kwargs = {"content_type": "application/json"} if body is not None else {}
        return call(f"/api/{path}", body, headers=self.headers, **kwargs)


@pytest.fixture
def api(client, admin_key) -> Api:
    return Api(client, admin_key)


def _error(response, status: int) -> dict:
    assert response.status_code == status, response.content
    return response.json()["error"]


def test_deploy_list_get_scale_stop_start_restart_update_and_delete(api, model, admin_user):
    created = api("post", "deployments", {"name": "tiny", "replicas": 2, "max_model_len": 256})
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["name"], body["model"], body["replicas"], body["max_model_len"]) == (
        "tiny",
        "tiny",
        2,
        256,
    )
    assert body["ready_replicas"] == 0 and body["replica_states"] == []

    listing = api("get", "deployments").json()
    assert listing["object"] == "list" and [d["name"] for d in listing["data"]] == ["tiny"]
    assert api("get", "deployments/tiny").json()["replicas"] == 2

    assert api("post", "deployments/tiny/scale", {"replicas": 4}).json()["replicas"] == 4
    stopped = api("post", "deployments/tiny/stop").json()
    assert (stopped["replicas"], stopped["stopped_replicas"]) == (0, 4)
    assert api("post", "deployments/tiny/start").json()["replicas"] == 4
    generation = api("get", "deployments/tiny").json()["generation"]
    restarted = api("post", "deployments/tiny/restart").json()
    assert (restarted["generation"], restarted["replicas"]) == (generation + 1, 4)

    changed = api("patch", "deployments/tiny", {"kv_cache_gb": 0.5}).json()
    assert (changed["kv_cache_gb"], changed["replicas"], changed["max_model_len"]) == (0.5, 4, 256)

    deleted = api("delete", "deployments/tiny")
    assert deleted.json() == {"name": "tiny", "object": "deployment.deleted", "deleted": True}
    assert not Deployment.objects.exists()

    events = AuditEvent.objects.order_by("pk").filter(action__startswith="deployment.")
    assert [e.action for e in events] == [
        "deployment.create",
        "deployment.scale",
        "deployment.stop",
        "deployment.start",
        "deployment.restart",
        "deployment.deploy",
        "deployment.undeploy",
    ]
    assert {e.actor for e in events} == {admin_user}
    assert all(e.actor_label.startswith("admin (API key deployer, sk-") for e in events)


def test_a_deployment_shows_its_replicas_live_state(api, model, redis_client):
    node = node_register(redis_client, name="host-a", ttl_s=30, memory_bytes=16 * GIB)
    deployment = services.deployment_deploy(name="tiny", replicas=1)
    Replica.objects.create(
        deployment=deployment, node=node, engine_id="e-1", state="ready", restarts=2, gpu_index=1
    )
    Replica.objects.create(deployment=deployment, state="stopped")  # history: left out
    body = api("get", "deployments/tiny").json()
    assert body["ready_replicas"] == 1
    (replica,) = body["replica_states"]
    seen = (replica["node"], replica["gpu_index"], replica["engine_id"], replica["state"])
    assert seen == ("host-a", 1, "e-1", "ready") and replica["restarts"] == 2


def test_nodes_list_and_detail(api, model, redis_client):
    node = node_register(
        redis_client, name="host-a", ttl_s=30, num_cpus=8, memory_bytes=16 * GIB, labels={"z": "1"}
    )
    register_lost_node(redis_client, name="host-b")
    deployment = services.deployment_deploy(name="tiny", replicas=1)
    Replica.objects.create(deployment=deployment, node=node, engine_id="e-1", state="loading")
    nodes = {n["name"]: n for n in api("get", "nodes").json()["data"]}
    assert nodes["host-a"]["live"] is True and nodes["host-b"]["live"] is False
    assert (nodes["host-a"]["num_cpus"], nodes["host-a"]["labels"]) == (8, {"z": "1"})
    assert nodes["host-a"]["replicas"] == [
        {"deployment": "tiny", "state": "loading", "gpu_index": None, "engine_id": "e-1"}
    ]
    assert api("get", "nodes/host-a").json()["memory_bytes"] == 16 * GIB
    assert _error(api("get", "nodes/nowhere"), 404)["message"] == "No node named 'nowhere'."


@pytest.mark.parametrize(
    ("path", "body", "param", "message"),
    [
        ("deployments", {"name": "x", "model": "nope"}, "model", "no served model named 'nope'"),
        ("deployments", {"name": "tiny", "replicas": -1}, "replicas", "greater than or equal"),
        ("deployments", {"name": "tiny", "kv_cache_gb_": 1}, "kv_cache_gb_", "unknown setting"),
        ("deployments", {"name": "tiny", "device": "tpu"}, "device", "not a valid choice"),
        ("deployments", {"replicas": 1}, "name", "This field is required"),
        ("deployments/tiny/scale", {"replicas": -2}, "replicas", "greater than or equal"),
        ("deployments/tiny/scale", {}, "replicas", "This field is required"),
        # Past the columns (a 500 from the database before) or past any fleet (a typo).
        ("deployments", {"name": "tiny", "max_num_seqs": 2**63}, "max_num_seqs", "less than"),
        ("deployments/tiny/scale", {"replicas": 2**63}, "replicas", "less than or equal to 1024"),
        ("deployments/tiny/scale", {"replicas": 10_000}, "replicas", "less than or equal to 1024"),
    ],
)
def test_bad_input_is_a_400_naming_the_parameter(api, model, path, body, param, message):
    services.deployment_deploy(name="tiny", replicas=1)
    error = _error(api("post", path, body), 400)
    assert error["param"] == param and message in error["message"]
    assert error["type"] == "invalid_request_error"
    assert Deployment.objects.get().replicas == 1  # nothing changed


def test_unknown_setting_in_a_change_and_an_unknown_deployment(api, model):
    services.deployment_deploy(name="tiny", replicas=1)
    assert _error(api("patch", "deployments/tiny", {"gpus": 2}), 400)["param"] == "gpus"
    assert _error(api("get", "deployments/other"), 404)["message"] == "No deployment named 'other'."
    assert _error(api("post", "deployments/other/scale", {"replicas": 1}), 404)
    assert _error(api("get", "replicas"), 404)["message"] == "Invalid URL (GET /api/replicas)"
    services.deployment_scale(name="tiny", replicas=0)  # by hand: no count to go back to
    error = _error(api("post", "deployments/tiny/start"), 400)
    assert error["message"] == "tiny was not stopped; scale it to the replicas you want"


def test_a_body_that_is_not_json_is_a_400(client, admin_key, model):
    response = client.post(
        "/api/deployments",
        "{not json",
        content_type="application/json",
        headers={"Authorization": f"Bearer {admin_key}"},
    )
    assert "could not parse the JSON body" in _error(response, 400)["message"]
    deep = '{"replicas": ' + "[" * 5000 + "]" * 5000 + "}"  # json's recursion: a 500 before
    response = client.post(
        "/api/deployments",
        deep,
        content_type="application/json",
        headers={"Authorization": f"Bearer {admin_key}"},
    )
    assert "nested deeper than 64" in _error(response, 400)["message"]


def test_no_key_401_a_tenant_key_403_and_a_key_of_no_longer_staff_403(
    client, model, make_tenant, make_key, admin_user, admin_key
):
    assert _error(Api(client, None)("get", "deployments"), 401)["code"] == "invalid_api_key"
    assert _error(Api(client, "sk-wrong12345678")("get", "deployments"), 401)

    _, every_endpoint = make_key(make_tenant("Acme"))  # no scopes: every /v1 endpoint
    error = _error(Api(client, every_endpoint)("get", "deployments"), 403)
    assert error["code"] == "insufficient_scope" and "admin scope" in error["message"]
    _, chat_only = make_key(make_tenant("Beta"), scopes=["chat.completions"])
    assert _error(Api(client, chat_only)("post", "deployments", {"name": "tiny"}), 403)
    assert not Deployment.objects.exists()

    admin_user.is_staff = False
    admin_user.save()
    error = _error(Api(client, admin_key)("get", "deployments"), 403)
    assert error["message"] == "This API key's owner is not an active staff user."


def test_only_a_staff_users_own_key_may_hold_the_admin_scope(make_tenant):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError, match="only for a staff user's own key"):
        api_key_create(tenant=make_tenant("Acme"), scopes=["admin"])


def test_create_api_key_makes_a_staff_users_admin_key(client, admin_user, model, redis_client):
    out = io.StringIO()
    call_command("create_api_key", "--staff-user", "admin", "--scope", "admin", stdout=out)
    secret = out.getvalue().splitlines()[-1]
    assert Api(client, secret)("get", "deployments").status_code == 200
    with pytest.raises(CommandError, match="no active staff user named 'nobody'"):
        call_command("create_api_key", "--staff-user", "nobody", "--scope", "admin")
