"""Writes a node agent makes: its Node (register, heartbeat, leave) and the states of the
replicas placed on it. Every replica change is conditional on the state the agent last saw,
so an agent never overwrites what the reconciler decided meanwhile (a replica it marked lost
or draining)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import redis
from django.db import transaction
from django.utils import timezone

from controlplane.fleet.liveness import node_beat, node_forget
from controlplane.fleet.models import ACTIVE_STATES, Node, Replica


def node_register(
    client: redis.Redis,
    *,
    name: str,
    ttl_s: float,
    address: str = "",
    num_cpus: int = 0,
    memory_bytes: int = 0,
    gpus: list[dict] | None = None,
    labels: dict[str, str] | None = None,
) -> Node:
    """Create or update the node ``name`` with its resources, mark it ready and beat once.

    An agent registers before it starts any engine, so replicas still recorded active on its
    node belong to an earlier run of it (killed, or its host rebooted): they are marked lost,
    and the reconciler places fresh ones, rather than the new agent taking over records whose
    engine ids and restart counts describe processes that are gone."""
    Replica.objects.filter(node__name=name, state__in=ACTIVE_STATES).update(
        state=Replica.State.LOST,
        reason=f"node agent {name} started again; its engines were gone",
        updated_at=timezone.now(),
    )
    node, _ = Node.objects.update_or_create(
        name=name,
        defaults={
            "address": address,
            "num_cpus": num_cpus,
            "memory_bytes": memory_bytes,
            "gpus": gpus or [],
            "labels": labels or {},
            "state": Node.State.READY,
            "last_heartbeat": timezone.now(),
        },
    )
    node_beat(client, name, ttl_s=ttl_s)
    return node


def node_heartbeat(node: Node) -> None:
    """What the database shows of a beat (liveness itself is the Redis key, ``node_beat``)."""
    Node.objects.filter(pk=node.pk).update(last_heartbeat=timezone.now(), state=Node.State.READY)


@transaction.atomic
def node_leave(client: redis.Redis, node: Node) -> None:
    """The agent stops: its live replicas stopped (so the reconciler places them elsewhere),
    the node gone."""
    node_forget(client, node.name)
    Replica.objects.filter(node=node, state__in=ACTIVE_STATES).update(
        state=Replica.State.STOPPED, reason=f"node agent {node.name} stopped"
    )
    Node.objects.filter(pk=node.pk).update(state=Node.State.GONE)


def replica_update(replica: Replica, *, expect: Iterable[str] | None = None, **fields: Any) -> bool:
    """Set ``fields`` on ``replica`` if its state is still one of ``expect`` (default: the one
    read into ``replica``); True when it was written. ``replica`` is updated to match."""
    expect = tuple(expect) if expect is not None else (replica.state,)
    fields["updated_at"] = timezone.now()
    written = Replica.objects.filter(pk=replica.pk, state__in=expect).update(**fields)
    if written:
        for field, value in fields.items():
            setattr(replica, field, value)
    return bool(written)
