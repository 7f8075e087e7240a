"""/metrics shows the fleet: replicas per deployment and state, replicas wanted, replicas no
node fits, and nodes live now."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controlplane.deployments.models import ServedModel
from controlplane.fleet import services
from controlplane.fleet.agent_writes import node_register
from controlplane.fleet.placement import GIB
from controlplane.fleet.reconciler import reconcile
from controlplane.metrics import register_collector
from tests.support.fleet_nodes import register_lost_node

pytestmark = pytest.mark.django_db


def _samples(client, name: str) -> dict[tuple, float]:
    register_collector()
    response = client.get("/metrics")
    assert response.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    return {tuple(sorted(s.labels.items())): s.value for s in families[name].samples}


def test_metrics_show_replicas_by_state_unplaced_ones_and_live_nodes(client, redis_client):
    ServedModel.objects.create(
        name="tiny", path="/nowhere", architecture="LlamaForCausalLM", num_parameters=1000
    )
    node_register(redis_client, name="small", ttl_s=30, memory_bytes=2 * GIB)
    register_lost_node(redis_client, name="dead", memory_bytes=64 * GIB)
    # Each replica needs about 1.5 GiB: the live 2 GiB node takes one, two wait unplaced.
    services.deployment_deploy(name="tiny", replicas=3)
    reconcile(redis_client)

    replicas = _samples(client, "platform:fleet_replicas")
    key = (("deployment", "tiny"), ("model_name", "tiny"))
    assert replicas[(*key, ("state", "pending"))] == 3
    assert replicas[(*key, ("state", "ready"))] == 0
    assert _samples(client, "platform:fleet_replicas_desired") == {key: 3}
    assert _samples(client, "platform:fleet_replicas_unplaced") == {(("deployment", "tiny"),): 2}
    nodes = _samples(client, "platform:fleet_nodes")
    assert nodes == {(("live", "true"),): 1, (("live", "false"),): 1}
