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

Where steps can be paused between layers (step_preemption.py), the loop adds a batch's new
requests a slice at a time (``first_slice``), the rest waiting at the head of the inbox for the
next pause, so no single pause spends long adding a flood.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TypeVar

from engine.service.redis_input import NewRequest

E = TypeVar("E")

# Prompt tokens of the new requests the loop adds at one time while steps can be paused
# (step_preemption.py): a slice, at the end of a step or between two layers; the rest wait in
# the inbox for the next pause. Adding a 1,000-token request costs 0.16 ms in a quiet process
# on the 2-core EPYC (its block hashes, its checks, its record), and up to 1.2 ms while the
# flood's client and Redis take the cores: a flood's hundred, added in one pause, held the step
# in flight and any newcomer behind them for 21-32 ms (bench/tenant_fairness.py, 2026-11-27),
# and 8,192-token slices still for 6-11 ms. A step of the tiny model pauses about ten times, so
# a flood still enters the engine faster than it runs.
SLICE_TOKENS = 4096

Intake = Callable[[list[E], bool], tuple[list[E], list[NewRequest]]]


def intake_order(policy: str) -> Intake:
    """How the loop orders a batch of events before adding them, under ``policy``; with
    ``sliced``, only the first slice of its new requests is to be added now (``first_slice``),
    the others later."""
    order = fewest_first if policy == "fair" else list

    def intake(events: list[E], sliced: bool) -> tuple[list[E], list[NewRequest]]:
        events = order(events)
        return first_slice(events) if sliced else (events, [])

    return intake


def first_slice(events: list[E], tokens: int = SLICE_TOKENS) -> tuple[list[E], list[NewRequest]]:
    """``events`` with their new requests up to the one whose prompt brings the count past
    ``tokens`` (at least one), every other event in its place; and the new requests after it,
    in their order, to be added later."""
    now, later, taken = [], [], 0
    for event in events:
        if not isinstance(event, NewRequest):
            now.append(event)
        elif taken >= tokens:
            later.append(event)
        else:
            taken += len(event.request.prompt_token_ids)
            now.append(event)
    return now, later


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
