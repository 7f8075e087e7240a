"""Deploy, scale and undeploy through the services, and the reconciler placing, replacing and
retiring replicas: the database and a real Redis, no engine processes."""

from __future__ import annotations

import pytest

from controlplane.audit.models import AuditEvent
from controlplane.deployments.models import ServedModel
from controlplane.fleet import services
from controlplane.fleet.agent_writes import node_leave, node_register
from controlplane.fleet.liveness import live_node_names, node_forget, under_fleet_lock
from controlplane.fleet.models import Node, Replica
from controlplane.fleet.placement import GIB
from controlplane.fleet.reconciler import reconcile, reconcile_once

pytestmark = pytest.mark.django_db

State = Replica.State


@pytest.fixture
def model():
    return ServedModel.objects.create(
        name="tiny", path="/nowhere", architecture="LlamaForCausalLM", num_parameters=1000
    )


def _node(client, name, memory_gib=16, **labels):
    return node_register(client, name=name, ttl_s=30, memory_bytes=memory_gib * GIB, labels=labels)


def _states(deployment):
    return sorted((r.state, r.node.name if r.node else None) for r in deployment.replicas_set.all())


def test_deploy_scale_undeploy_leave_audit_events_with_the_actor(model, redis_client):
    services.deployment_deploy(name="tiny", replicas=2, actor_label="cli:alice")
    services.deployment_scale(name="tiny", replicas=3, actor_label="cli:alice")
    services.deployment_undeploy(name="tiny", actor_label="cli:bob")
    events = AuditEvent.objects.order_by("pk").values_list("action", "actor_label", "details")
    assert [(a, who) for a, who, _ in events] == [
        ("deployment.create", "cli:alice"),
        ("deployment.scale", "cli:alice"),
        ("deployment.undeploy", "cli:bob"),
    ]
    assert list(events)[1][2] == {"replicas": [2, 3]}


def test_bad_requests_are_refused(model):
    with pytest.raises(services.DeploymentError, match="no served model"):
        services.deployment_deploy(name="other", replicas=1)
    with pytest.raises(services.DeploymentError, match="0 to 1024"):
        services.deployment_deploy(name="tiny", replicas=-1)
    with pytest.raises(services.DeploymentError, match="no deployment"):
        services.deployment_scale(name="nothing", replicas=1)


def test_replicas_are_placed_spread_over_live_nodes(model, redis_client):
    _node(redis_client, "a")
    _node(redis_client, "b")
    deployment = services.deployment_deploy(name="tiny", replicas=3)
    report = reconcile(redis_client)
    assert report.num_created == 3
    nodes = sorted(r.node.name for r in deployment.replicas_set.all())
    assert nodes in (["a", "a", "b"], ["a", "b", "b"])
    assert reconcile(redis_client).num_created == 0  # nothing left to do


def test_labels_and_memory_decide_where_replicas_go(model, redis_client):
    _node(redis_client, "small", memory_gib=1)
    _node(redis_client, "big", memory_gib=64, zone="b")
    deployment = services.deployment_deploy(name="tiny", replicas=2, kv_cache_gb=2.0)
    reconcile(redis_client)
    assert _states(deployment) == [(State.PENDING, "big"), (State.PENDING, "big")]
    services.deployment_deploy(name="tiny", replicas=3, node_selector={"zone": "c"})
    reconcile(redis_client)
    unplaced = deployment.replicas_set.get(node=None)
    assert "no live node with labels {'zone': 'c'}" in unplaced.reason
    _node(redis_client, "c-node", zone="c")
    assert reconcile(redis_client).num_placed == 1
    unplaced.refresh_from_db()
    assert unplaced.node.name == "c-node"


def test_replicas_of_a_lost_node_are_replaced_on_a_live_one(model, redis_client):
    _node(redis_client, "a")
    _node(redis_client, "b")
    deployment = services.deployment_deploy(name="tiny", replicas=2)
    reconcile(redis_client)
    node_forget(redis_client, "b")  # its heartbeat expired
    report = reconcile(redis_client)
    assert report.lost_nodes == ["b"] and report.num_lost == 1 and report.num_created == 1
    assert _states(deployment) == [(State.LOST, "b"), (State.PENDING, "a"), (State.PENDING, "a")]
    assert Node.objects.get(name="b").state == Node.State.LOST
    lost = deployment.replicas_set.get(state=State.LOST)
    assert lost.reason == "node b stopped heartbeating"


def test_an_agent_that_leaves_has_its_replicas_placed_elsewhere(model, redis_client):
    _node(redis_client, "a")
    b = _node(redis_client, "b")
    deployment = services.deployment_deploy(name="tiny", replicas=2)
    reconcile(redis_client)
    node_leave(redis_client, b)
    assert live_node_names(redis_client) == {"a"}
    reconcile(redis_client)
    assert _states(deployment) == [
        (State.PENDING, "a"),
        (State.PENDING, "a"),
        (State.STOPPED, "b"),
    ]


def test_scaling_down_retires_failed_then_least_advanced_replicas(model, redis_client):
    _node(redis_client, "a")
    deployment = services.deployment_deploy(name="tiny", replicas=3)
    reconcile(redis_client)
    first, second, third = deployment.replicas_set.order_by("pk")
    Replica.objects.filter(pk=first.pk).update(state=State.READY)
    Replica.objects.filter(pk=second.pk).update(state=State.FAILED)
    services.deployment_scale(name="tiny", replicas=1)
    reconcile(redis_client)
    assert dict(deployment.replicas_set.values_list("pk", "state")) == {
        first.pk: State.READY,
        second.pk: State.STOPPED,
        third.pk: State.DRAINING,
    }


def test_a_failed_replica_holds_its_slot_until_deployed_again(model, redis_client):
    _node(redis_client, "a")
    deployment = services.deployment_deploy(name="tiny", replicas=1)
    reconcile(redis_client)
    deployment.replicas_set.update(state=State.FAILED)
    assert reconcile(redis_client).num_created == 0
    services.deployment_deploy(name="tiny", replicas=1)
    assert reconcile(redis_client).num_created == 1
    assert _states(deployment) == [(State.PENDING, "a"), (State.STOPPED, "a")]


def test_only_one_pass_runs_at_a_time(model, redis_client):
    _node(redis_client, "a")
    services.deployment_deploy(name="tiny", replicas=1)
    inner = under_fleet_lock(redis_client, lambda: reconcile_once(redis_client))
    assert inner is None  # the lock was held: the second pass stood aside
    assert reconcile_once(redis_client).num_created == 1


def _gpu_node(client, name, *gpu_gib):
    gpus = [{"name": "NVIDIA H100", "memory_bytes": int(g * GIB)} for g in gpu_gib]
    return node_register(client, name=name, ttl_s=30, memory_bytes=64 * GIB, gpus=gpus)


def test_gpu_replicas_are_pinned_to_different_gpus_and_counted_on_them(model, redis_client):
    _gpu_node(redis_client, "g", 24, 24)
    deployment = services.deployment_deploy(
        name="tiny", replicas=2, device="cuda", kv_cache_gb=10.0
    )
    reconcile(redis_client)
    replicas = list(deployment.replicas_set.order_by("pk"))
    assert [(r.node.name, r.gpu_index) for r in replicas] == [("g", 0), ("g", 1)]
    # Each GPU now has ~13.5 GiB free: a third 10.5 GiB replica fits, on either, never on
    # the sum of what both have left.
    services.deployment_scale(name="tiny", replicas=3)
    reconcile(redis_client)
    third = deployment.replicas_set.order_by("pk").last()
    assert third.node.name == "g" and third.gpu_index in (0, 1)
    services.deployment_scale(name="tiny", replicas=5)  # 3 GiB left on one GPU, 13.5 on one
    reconcile(redis_client)
    placed = deployment.replicas_set.exclude(node=None)
    assert sorted(placed.values_list("gpu_index", flat=True)) == [0, 0, 1, 1]
    (waiting,) = deployment.replicas_set.filter(node=None)
    assert waiting.reason.startswith("no live node has a GPU with 10.5 GiB free")


def test_a_gpu_replica_bigger_than_any_one_gpu_waits_with_the_reason(model, redis_client):
    _gpu_node(redis_client, "g", 24, 24)  # 48 GiB of GPU memory, but 24 on each GPU
    deployment = services.deployment_deploy(
        name="tiny", replicas=1, device="cuda", kv_cache_gb=30.0
    )
    report = reconcile(redis_client)
    assert report.num_unplaced == 1
    (replica,) = deployment.replicas_set.all()
    assert replica.node is None and replica.gpu_index is None
    assert replica.reason.startswith("needs 30.5 GiB on one GPU, but the largest GPU")
    assert "24.0 GiB: an engine runs on a single GPU" in replica.reason


def test_cpu_replicas_get_no_gpu(model, redis_client):
    _gpu_node(redis_client, "g", 24)
    deployment = services.deployment_deploy(name="tiny", replicas=1, device="cpu")
    reconcile(redis_client)
    (replica,) = deployment.replicas_set.all()
    assert replica.node.name == "g" and replica.gpu_index is None
