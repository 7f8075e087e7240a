"""The order in which the service loop adds a batch of new requests to the engine under the
fair policy: tenants with the fewest requests in the batch first.

Why: the loop adds what the Redis reader queued all at once, in stream order, at a step's end
or between two layers (step_preemption.py). When a flood's requests reach the engine, a
hundred of them can sit ahead of another tenant's one request; adding each costs a fraction of
a millisecond (its block hashes, its record), several on a CPU the API and the flood's client
share. Through the API on the 2-core VM, tenant B's request waited 33-143 ms in the inbox
behind tenant A's (issue 26's flood, 2026-11-26): its whole time to first token under the
flood otherwise, against about 20 ms idle. Stream order stays the order within a tenant, and
the fair queue, not the intake, decides who runs (a request added a little later waits no
longer for it); the FCFS policy keeps the stream order across tenants.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TypeVar

from engine.service.redis_input import NewRequest

E = TypeVar("E")


def intake_order(policy: str) -> Callable[[list[E]], list[E]]:
    """How the loop orders a batch of events before adding them, under ``policy``."""
    return fewest_first if policy == "fair" else list


def fewest_first(events: list[E]) -> list[E]:
    """``events`` with their new requests reordered, tenants with the fewest in the batch first
    (stably); other events keep their places."""
    counts = Counter(e.request.tenant for e in events if isinstance(e, NewRequest))
    if len(counts) < 2:
        return events
    slots = [i for i, e in enumerate(events) if isinstance(e, NewRequest)]
    ordered = sorted((events[i] for i in slots), key=lambda e: counts[e.request.tenant])
    out = list(events)
    for i, event in zip(slots, ordered, strict=True):
        out[i] = event
    return out


def singles_and_rest(events: list[NewRequest]) -> tuple[list[NewRequest], list[NewRequest]]:
    """New requests split into those whose tenant has one in the batch, and the others (each
    part in stream order)."""
    counts = Counter(e.request.tenant for e in events)
    singles = [e for e in events if counts[e.request.tenant] == 1]
    return singles, [e for e in events if counts[e.request.tenant] > 1]
