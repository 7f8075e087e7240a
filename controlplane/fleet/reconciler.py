"""The reconciler: makes the replica records match what deployments want on the live nodes.

One pass (``reconcile``):
1. nodes whose heartbeat expired are marked lost, and their active replicas too;
2. replicas still waiting for a node (none fitted before) are placed if one fits now;
3. a deployment short of replicas gets new pending ones, placed (``placement.place``);
4. a deployment with too many retires the surplus: failed and unplaced ones are stopped,
   placed ones set draining (their agent drains and stops the engine);
5. a deployment with replicas of an older generation (settings changed, or restarted) is
   rolled instead of 3 and 4: one new replica at a time, ready before an old one drains
   (``rollout.py``).

Scale to zero hooks in around steps 2-4 (``demand_pass.py``): before them cold starts are
counted and idle scale-to-zero deployments go to 0; after them a replica still waiting for a
node may evict an idle one.

A failed replica keeps its slot until the next deploy, so a broken checkpoint ends in
``failed`` rather than in new replicas crashing forever.

Agents run a pass in their loop, so any live agent keeps the fleet reconciled. Two passes
at once could both see a replica missing and both create one; ``reconcile_once`` therefore
runs a pass only under a Redis lock (``liveness.under_fleet_lock``), and an agent that finds
it held skips its pass. A Redis lock rather than a database row lock: SQLite, the default
database, has no SELECT ... FOR UPDATE (Django ignores it there), every agent already shares
the Redis, and the lock's TTL frees it if its holder dies mid-pass.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

import redis
from django.db import transaction

from controlplane.fleet import demand_pass, rollout, selectors
from controlplane.fleet.liveness import live_node_names, under_fleet_lock
from controlplane.fleet.models import ACTIVE_STATES, RUNNING_STATES, Deployment, Node, Replica
from controlplane.fleet.placement import NodeRoom, no_fit_reason, place

logger = logging.getLogger(__name__)

State = Replica.State


@dataclass
class ReconcileReport:
    lost_nodes: list[str] = field(default_factory=list)
    num_lost: int = 0
    num_created: int = 0
    num_placed: int = 0
    num_unplaced: int = 0
    num_retired: int = 0


def reconcile_once(client: redis.Redis) -> ReconcileReport | None:
    """One pass under the fleet lock; None when another process holds it."""
    return under_fleet_lock(client, lambda: reconcile(client))


@transaction.atomic
def reconcile(client: redis.Redis) -> ReconcileReport:
    """One pass (see the module's docstring). Call it through ``reconcile_once``."""
    report = ReconcileReport()
    live = live_node_names(client)
    _mark_lost(live, report)
    demand_pass.before_placement(client)  # cold starts counted, idle ones to 0 (then drained)
    nodes = list(Node.objects.filter(name__in=live))
    rooms = selectors.node_rooms(nodes)
    node_ids = {node.name: node.pk for node in nodes}
    for deployment in selectors.deployment_list():
        _reconcile_deployment(deployment, rooms, node_ids, report)
    demand_pass.after_placement(client, nodes)  # evict for what still waits
    if report.num_lost or report.num_created or report.num_retired or report.num_placed:
        logger.info("fleet reconciled: %s", report)
    return report


def _mark_lost(live: set[str], report: ReconcileReport) -> None:
    dead = Node.objects.filter(state=Node.State.READY).exclude(name__in=live)
    report.lost_nodes = list(dead.values_list("name", flat=True))
    dead.update(state=Node.State.LOST)
    stranded = Replica.objects.filter(state__in=ACTIVE_STATES, node__isnull=False).exclude(
        node__name__in=live
    )
    for replica in stranded.select_related("node"):
        replica.state = State.LOST
        replica.reason = f"node {replica.node.name} stopped heartbeating"
        replica.save(update_fields=["state", "reason", "updated_at"])
        report.num_lost += 1


def _reconcile_deployment(
    deployment: Deployment,
    rooms: dict[str, NodeRoom],
    node_ids: dict[str, int],
    report: ReconcileReport,
) -> None:
    holding = list(deployment.replicas_set.filter(state__in=(*RUNNING_STATES, State.FAILED)))
    need = selectors.replica_need(deployment)
    step = rollout.plan(
        generation=deployment.generation, replicas=deployment.replicas, holding=holding
    )
    # Spread: during a rollout, over the new generation's replicas (the old ones are leaving).
    spread = holding if step is None else rollout.current(deployment.generation, holding)
    counts = Counter(r.node.name for r in spread if r.node_id is not None)
    for room in rooms.values():
        room.num_replicas = counts[room.name]
    surplus = len(holding) - deployment.replicas
    if step is not None:  # a rollout under way does its steps instead of the count-keeping
        surplus = -_roll(step, report)
        holding = [r for r in holding if r not in step.stop]
    elif surplus > 0:
        _retire(holding, surplus, report)
        return
    waiting = [r for r in holding if r.node_id is None]
    for replica, slot in zip(waiting, place(need, len(waiting), [*rooms.values()]), strict=True):
        if slot is not None:
            replica.node_id, replica.gpu_index = node_ids[slot.node], slot.gpu
            replica.reason = ""
            replica.save(update_fields=["node", "gpu_index", "reason", "updated_at"])
            report.num_placed += 1
    for slot in place(need, -surplus, list(rooms.values())):
        Replica.objects.create(
            deployment=deployment,
            node_id=node_ids[slot.node] if slot is not None else None,
            gpu_index=slot.gpu if slot is not None else None,
            memory_bytes=need.memory_bytes,
            generation=deployment.generation,
            reason="" if slot is not None else no_fit_reason(need, list(rooms.values())),
        )
        report.num_created += 1
        report.num_unplaced += slot is None


# Retired first: failed, then not yet placed, then the least far along, newest first.
_RETIRE_ORDER = {
    State.FAILED: 0,
    State.PENDING: 1,
    State.STARTING: 2,
    State.LOADING: 3,
    State.READY: 4,
}


def _roll(step: rollout.RolloutStep, report: ReconcileReport) -> int:
    """Stop and drain what ``step`` says; the number of replicas it wants created."""
    for replica, state in [(r, State.STOPPED) for r in step.stop] + [
        (r, State.DRAINING) for r in step.drain
    ]:
        replica.state = state
        replica.reason = "replaced by a rolling restart"
        replica.save(update_fields=["state", "reason", "updated_at"])
        report.num_retired += 1
    return step.create


def _retire(holding: list[Replica], surplus: int, report: ReconcileReport) -> None:
    victims = sorted(holding, key=lambda r: (_RETIRE_ORDER[r.state], r.node_id is not None, -r.pk))[
        :surplus
    ]
    for replica in victims:
        placed_and_live = replica.node_id is not None and replica.state != State.FAILED
        replica.state = State.DRAINING if placed_and_live else State.STOPPED
        replica.reason = "scaled down"
        replica.save(update_fields=["state", "reason", "updated_at"])
        report.num_retired += 1
