"""Rolling restarts through the services and the reconciler: the database and a real Redis,
with replica states set as agents would set them (no engine processes; the real-process
rollout is in test_agents.py)."""

from __future__ import annotations

import pytest

from controlplane.audit.models import AuditEvent
from controlplane.deployments.models import ServedModel
from controlplane.fleet import services
from controlplane.fleet.agent_writes import node_register
from controlplane.fleet.models import Replica
from controlplane.fleet.placement import GIB
from controlplane.fleet.reconciler import reconcile

pytestmark = pytest.mark.django_db

State = Replica.State


@pytest.fixture
def model():
    return ServedModel.objects.create(
        name="tiny", path="/nowhere", architecture="LlamaForCausalLM", num_parameters=1000
    )


@pytest.fixture
def nodes(redis_client):
    for name in ("a", "b"):
        node_register(redis_client, name=name, ttl_s=30, memory_bytes=16 * GIB)


def _ready_all_loading(deployment):
    """What agents do: every pending replica starts and becomes ready."""
    deployment.replicas_set.filter(state=State.PENDING).update(state=State.READY)


def _view(deployment):
    return [(r.generation, r.state) for r in deployment.replicas_set.order_by("pk")]


def _running(deployment):
    return [r for r in deployment.replicas_set.all() if r.state in (State.PENDING, State.READY)]


def test_a_settings_change_rolls_replicas_one_at_a_time(model, nodes, redis_client):
    deployment = services.deployment_deploy(name="tiny", replicas=2, max_num_seqs=16)
    reconcile(redis_client)
    _ready_all_loading(deployment)
    services.deployment_deploy(name="tiny", replicas=2, max_num_seqs=8)
    deployment.refresh_from_db()
    assert deployment.generation == 2

    ready_counts = []
    for _ in range(10):  # passes, each followed by the agents catching up
        reconcile(redis_client)
        ready_counts.append(sum(r.state == State.READY for r in deployment.replicas_set.all()))
        # A new replica loading: the old ones must all still be there.
        if any(r.state == State.PENDING for r in deployment.replicas_set.all()):
            assert len(_running(deployment)) == 3
        _ready_all_loading(deployment)
        deployment.replicas_set.filter(state=State.DRAINING).update(state=State.STOPPED)
    assert min(ready_counts) >= 2  # never fewer ready than wanted
    assert _view(deployment) == [
        (1, State.STOPPED),
        (1, State.STOPPED),
        (2, State.READY),
        (2, State.READY),
    ]
    assert {r.node.name for r in _running(deployment)} == {"a", "b"}


def test_the_surge_waits_while_the_new_replica_loads(model, nodes, redis_client):
    deployment = services.deployment_deploy(name="tiny", replicas=1)
    reconcile(redis_client)
    _ready_all_loading(deployment)
    services.deployment_restart(name="tiny", actor_label="cli:alice")
    reconcile(redis_client)
    assert _view(deployment) == [(1, State.READY), (2, State.PENDING)]
    deployment.replicas_set.filter(generation=2).update(state=State.LOADING)
    reconcile(redis_client)
    assert _view(deployment) == [(1, State.READY), (2, State.LOADING)]
    deployment.replicas_set.filter(generation=2).update(state=State.READY)
    reconcile(redis_client)
    assert _view(deployment) == [(1, State.DRAINING), (2, State.READY)]
    event = AuditEvent.objects.get(action="deployment.restart")
    assert event.actor_label == "cli:alice" and event.details["generation"] == 2


def test_a_failing_new_replica_stalls_the_rollout_with_the_old_one_serving(
    model, nodes, redis_client
):
    deployment = services.deployment_deploy(name="tiny", replicas=1)
    reconcile(redis_client)
    _ready_all_loading(deployment)
    services.deployment_restart(name="tiny")
    reconcile(redis_client)
    deployment.replicas_set.filter(generation=2).update(state=State.FAILED)
    reconcile(redis_client)
    reconcile(redis_client)
    assert _view(deployment) == [(1, State.READY), (2, State.FAILED)]


def test_unchanged_settings_roll_nothing(model, nodes, redis_client):
    deployment = services.deployment_deploy(name="tiny", replicas=1, max_num_seqs=8)
    reconcile(redis_client)
    services.deployment_deploy(name="tiny", replicas=2, max_num_seqs=8, scale_to_zero=True)
    deployment.refresh_from_db()
    assert deployment.generation == 1


def test_an_agent_started_again_leaves_its_old_replicas_lost(model, nodes, redis_client):
    deployment = services.deployment_deploy(name="tiny", replicas=1)
    reconcile(redis_client)
    _ready_all_loading(deployment)
    (node,) = {r.node.name for r in deployment.replicas_set.all()}
    node_register(redis_client, name=node, ttl_s=30, memory_bytes=16 * GIB)
    reconcile(redis_client)
    states = sorted(r.state for r in deployment.replicas_set.all())
    assert states == [State.LOST, State.PENDING]


def test_restart_deployment_command_starts_a_new_generation(model, nodes, redis_client):
    from io import StringIO

    from django.core.management import CommandError, call_command

    services.deployment_deploy(name="tiny", replicas=2)
    out = StringIO()
    call_command("restart_deployment", "tiny", stdout=out)
    assert "generation 2" in out.getvalue()
    event = AuditEvent.objects.get(action="deployment.restart")
    assert event.actor_label.startswith("manage.py restart_deployment (")
    with pytest.raises(CommandError, match="no deployment named 'nothing'"):
        call_command("restart_deployment", "nothing")
