"""The fleet's gauges: replicas per deployment and state, replicas wanted, replicas no node
fits (placement failures), and nodes live now.

Read at scrape time from the database (what the reconciler and the node agents wrote) and
Redis (node heartbeats), through the fleet's selectors, so every API process renders the same
figures, as for the vllm:* series.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from controlplane.metrics import definitions as d

logger = logging.getLogger(__name__)


def _gauge(spec: d.MetricSpec) -> GaugeMetricFamily:
    return GaugeMetricFamily(spec.name, spec.documentation, labels=list(spec.labels))


def fleet_families() -> Iterator[Metric]:
    # Imported here, not above: the metrics package is also imported where Django's apps are
    # not loaded (the engine readiness probe, python -m controlplane.metrics.engine_ready).
    from controlplane.fleet import selectors
    from controlplane.fleet.models import Node, Replica

    # Every state a replica holds a slot or a record in; stopped replicas are history.
    states = [state for state in Replica.State.values if state != Replica.State.STOPPED]
    replicas, desired = _gauge(d.FLEET_REPLICAS), _gauge(d.FLEET_REPLICAS_DESIRED)
    unplaced, nodes = _gauge(d.FLEET_REPLICAS_UNPLACED), _gauge(d.FLEET_NODES)
    try:
        deployments = selectors.deployment_list()
        counts = {(name, state): n for name, _, state, n in selectors.replica_state_counts()}
        waiting = selectors.replicas_unplaced()
        # A node whose agent stopped cleanly was taken out on purpose: not down.
        registered = [n.name for n in selectors.node_list() if n.state != Node.State.GONE]
        live = selectors.nodes_live()
    except Exception:  # /metrics must still answer, with every family announced
        logger.warning("metrics: cannot read the fleet, its series left out", exc_info=True)
        deployments, counts, waiting, registered, live = [], {}, {}, [], None
    for deployment in deployments:
        labels = [deployment.name, deployment.served_model.name]
        desired.add_metric(labels, deployment.replicas)
        for state in states:
            replicas.add_metric([*labels, state], counts.get((deployment.name, state), 0))
        unplaced.add_metric([deployment.name], waiting.get(deployment.name, 0))
    if live is not None:  # Redis unreadable: no figure rather than "every node dead"
        num_live = sum(name in live for name in registered)
        nodes.add_metric(["true"], num_live)
        nodes.add_metric(["false"], len(registered) - num_live)
    yield from (replicas, desired, unplaced, nodes)
