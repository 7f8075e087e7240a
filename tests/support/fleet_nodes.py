"""Nodes as the fleet's tests need them, beyond what an agent's own writes give."""

from __future__ import annotations

import redis

from controlplane.fleet.agent_writes import node_register
from controlplane.fleet.liveness import node_key
from controlplane.fleet.models import Node


def register_lost_node(client: redis.Redis, *, name: str, **resources) -> Node:
    """A node that registered once and whose heartbeat has since expired. Its key is deleted
    rather than given a millisecond's TTL: on a fast machine the reconcile that follows could
    still read a 1 ms heartbeat as live."""
    node = node_register(client, name=name, ttl_s=30, **resources)
    client.delete(node_key(name))
    return node
