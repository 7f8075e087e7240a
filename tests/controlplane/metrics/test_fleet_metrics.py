"""/metrics shows the fleet: replicas per deployment and state, replicas wanted, replicas no
node fits, and nodes live now."""

from __future__ import annotations

import logging

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controlplane.deployments.models import ServedModel
from controlplane.fleet import services
from controlplane.fleet.agent_writes import node_leave, node_register
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


def test_a_node_whose_agent_stopped_cleanly_is_not_counted_as_down(client, redis_client):
    """Taken out on purpose, it must not keep the NodeLost alert (deploy/prometheus) firing."""
    node_register(redis_client, name="up", ttl_s=30, memory_bytes=2 * GIB)
    register_lost_node(redis_client, name="crashed", memory_bytes=2 * GIB)
    node_leave(redis_client, node_register(redis_client, name="drained", ttl_s=30))
    nodes = _samples(client, "platform:fleet_nodes")
    assert nodes == {(("live", "true"),): 1, (("live", "false"),): 1}


def test_redis_away_leaves_the_node_count_out_and_logs_no_traceback(
    client, redis_client, settings, caplog
):
    """What the RedisUnreadable alert (deploy/prometheus/alerts.yml) reads: /metrics still
    answers, without platform:fleet_nodes, and each scrape logs a line, not a traceback."""
    node_register(redis_client, name="up", ttl_s=30, memory_bytes=2 * GIB)
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    with caplog.at_level(logging.WARNING):
        assert _samples(client, "platform:fleet_nodes") == {}
    assert len([r for r in caplog.records if "node heartbeats" in r.getMessage()]) == 1
    # The collector's other Redis reads (engine statuses, request series, cold starts) fail
    # too: each a line with the error, none a traceback.
    lines = [
        r
        for r in caplog.records
        if r.name.startswith(("controlplane.metrics", "controlplane.fleet"))
    ]
    assert len(lines) >= 3 and all(r.exc_info is None for r in lines)
    assert all("Error" in r.getMessage() for r in lines)
