"""Fair share across tenants: a Virtual Token Counter (Sheng et al., "Fairness in Serving Large
Language Models", OSDI 2024) with weights and priority classes.

Order of the waiting queue (``FairQueue``): the best service class first (interactive before
batch); inside it, the tenant whose virtual counter is lowest; inside a tenant, the request's
``priority`` (lower first), then its arrival. A client's ``priority`` therefore orders only its
own tenant's requests: it can never buy a place ahead of another tenant.

``VirtualTokenCounter``: each tenant's counter advances by the tokens the engine computes for it
divided by its weight: prompt tokens that missed the prefix cache (a cache hit is never
scheduled, so never charged) and one per output token. Tokens recomputed after a preemption are
not charged twice (``Request.num_charged_tokens`` is a high-water mark). A tenant that comes
back from idle (nothing waiting or running) is lifted to the lowest counter of the backlogged
tenants (less one token, so that it goes first among equals), so idle time banks no credit;
when nobody is backlogged it is lifted to the highest counter seen, so history does not carry
across an idle engine. The queue always serves someone when anyone waits (work-conserving):
the counters only choose who.

Shared steps: while two tenants or more have sent work within ``CONTENTION_WINDOW_S``, a step
computes at most ``fair_step_tokens`` prompt tokens (``contended``; decodes are never capped).
A request of a tenant under its share is admitted before the prefills of tenants over it, but
it still waits for the step in flight and shares its own step with what budget is left: at the
full ``max_num_batched_tokens`` of a flood's prompt chunks, those two steps, not its own prompt,
were most of its time to first token. One tenant alone keeps the full budget.

Preemption: under KV pressure the victim is a running request of the worst class, of the tenant
most over its share (highest counter), its latest arrival. The same choice makes room when the
batch is full and a waiting tenant is under its share (``fairness_victim``).
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.config import EngineConfig
    from engine.request import Request

# Service classes, best first; the index is the class rank the scheduler compares.
SERVICE_CLASSES = ("interactive", "batch")
# A waiting tenant takes a running request's place only when the running request's tenant is
# this many weighted tokens over it (about one full step), so two backlogged tenants whose
# counters cross do not swap places every step.
PREEMPT_MARGIN_TOKENS = 2048.0
RETURN_EDGE_TOKENS = 1.0
# How recently a second tenant must have sent a request for steps to be shared (its requests
# are often short and far apart: an interactive user, one message every few seconds).
CONTENTION_WINDOW_S = 10.0


def service_class_rank(name: str) -> int:
    """The rank of a service class name; ValueError for an unknown one."""
    try:
        return SERVICE_CLASSES.index(name or "interactive")
    except ValueError:
        raise ValueError(
            f"service_class must be one of {', '.join(SERVICE_CLASSES)}, got {name!r}"
        ) from None


class VirtualTokenCounter:
    """One weighted token counter per tenant (see the module docstring)."""

    def __init__(self) -> None:
        self.counters: dict[str, float] = {}
        self.last_arrival: dict[str, float] = {}  # tenant -> monotonic time

    def contended(self, now: float, unfinished: Iterable[Request]) -> bool:
        """Have two tenants or more work in the engine, or sent some lately?"""
        tenants = {t for t, at in self.last_arrival.items() if now - at < CONTENTION_WINDOW_S}
        for r in unfinished:
            if len(tenants) > 1:
                break
            tenants.add(r.tenant)
        return len(tenants) > 1

    def counter(self, tenant: str) -> float:
        return self.counters.get(tenant, 0.0)

    def on_arrival(self, request: Request, unfinished: Iterable[Request]) -> None:
        """Lift ``request``'s tenant if it returns from idle (no request of it among
        ``unfinished``, the scheduler's waiting and running requests)."""
        tenant = request.tenant
        self.last_arrival[tenant] = request.timestamps.queued or 0.0
        backlogged = {r.tenant for r in unfinished}
        if tenant in backlogged:
            return
        floor = min((self.counter(t) for t in backlogged), default=None)
        if floor is None:
            floor = max(self.counters.values(), default=0.0)
        else:  # one token under: among equals, the tenant that had nothing waiting goes first
            floor -= RETURN_EDGE_TOKENS
        self.counters[tenant] = max(self.counter(tenant), floor)

    def charge(self, request: Request, num_computed_after: int) -> None:
        """Charge the tokens ``request`` will have computed after this step that it was not
        charged for yet (recomputation after a preemption is free)."""
        num_new = num_computed_after - request.num_charged_tokens
        if num_new > 0:
            request.num_charged_tokens = num_computed_after
            self.counters[request.tenant] = self.counter(request.tenant) + num_new / request.weight

    def victim(self, running: list[Request]) -> Request:
        """The running request to preempt: worst class, most over-share tenant, latest
        arrival (lowest priority first among equals)."""
        return max(running, key=self._victim_key)

    def _victim_key(self, r: Request) -> tuple:
        return (r.service_class, self.counter(r.tenant), r.priority, r.timestamps.arrival or 0.0)

    def split_running(self, running: list[Request], head: Request) -> tuple[list, list]:
        """Running requests to schedule before admitting ``head`` (the best waiting request),
        and after it: prompt chunks of tenants above ``head``'s (class, counter) wait until it
        is admitted, so a tenant under its share is not queued behind their prefills."""
        bar = (head.service_class, self.counter(head.tenant))
        ahead, behind = [], []
        for r in running:
            prefilling = r.num_tokens - r.num_computed_tokens > 1
            late = prefilling and (r.service_class, self.counter(r.tenant)) > bar
            (behind if late else ahead).append(r)
        return ahead, behind

    def fairness_victim(self, candidate: Request, running: list[Request]) -> Request | None:
        """The running request that should yield its place in a full batch to the waiting
        ``candidate``, or None. It yields when it is of a worse class, or when its tenant is
        over ``candidate``'s by PREEMPT_MARGIN_TOKENS, or when ``candidate``'s tenant has
        nothing running and the victim's tenant has more than one request running."""
        if not running:
            return None
        victim = self.victim(running)
        if victim.service_class != candidate.service_class:
            return victim if victim.service_class > candidate.service_class else None
        if victim.tenant == candidate.tenant:
            return None
        gap = self.counter(victim.tenant) - self.counter(candidate.tenant)
        if gap > PREEMPT_MARGIN_TOKENS:
            return victim
        num_running = {}
        for r in running:
            num_running[r.tenant] = num_running.get(r.tenant, 0) + 1
        if candidate.tenant not in num_running and num_running[victim.tenant] > 1 and gap > 0:
            return victim
        return None


class FairQueue:
    """The waiting queue under the fair policy: per (class, tenant) heaps of (priority,
    arrival); ``peek`` picks the best class, then the tenant with the lowest counter.

    Picking scans the tenants that wait (a handful, rarely hundreds), cheaper than keeping a
    global order that every charge would invalidate.
    """

    def __init__(self, counter: VirtualTokenCounter) -> None:
        self.vtc = counter
        self._lanes: dict[tuple[int, str], list[tuple[int, float, int, Request]]] = {}
        self._order = itertools.count()
        self._len = 0

    def add(self, request: Request) -> None:
        key = (request.service_class, request.tenant)
        item = (request.priority, request.timestamps.arrival or 0.0, next(self._order), request)
        heapq.heappush(self._lanes.setdefault(key, []), item)
        self._len += 1

    # A preempted or skipped request goes back to its place by (priority, arrival).
    prepend = add

    def _best_lane(self) -> list[tuple[int, float, int, Request]]:
        if not self._len:
            raise IndexError("peek from an empty queue")
        best = min(
            self._lanes.items(),
            key=lambda kv: (kv[0][0], self.vtc.counter(kv[0][1]), kv[1][0][:3]),
        )
        return best[1]

    def peek(self) -> Request:
        return self._best_lane()[0][3]

    def pop(self) -> Request:
        request = heapq.heappop(self._best_lane())[3]
        self._forget(request)
        return request

    def remove(self, request: Request) -> None:
        lane = self._lanes[(request.service_class, request.tenant)]
        lane[:] = [item for item in lane if item[3] is not request]
        heapq.heapify(lane)
        self._forget(request)

    def _forget(self, request: Request) -> None:
        self._len -= 1
        key = (request.service_class, request.tenant)
        if not self._lanes[key]:
            del self._lanes[key]

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Request]:
        items = sorted(item for lane in self._lanes.values() for item in lane)
        return (item[3] for item in items)


class StepPrefill:
    """The prompt tokens one step may still compute (module docstring, "Shared steps")."""

    def __init__(self, left: float = float("inf")) -> None:
        self.left = left

    @classmethod
    def for_step(
        cls, vtc: VirtualTokenCounter | None, config: EngineConfig, unfinished: Iterable[Request]
    ) -> StepPrefill:
        cap = config.fair_step_tokens
        if vtc is None or not cap or not config.enable_chunked_prefill:
            return cls()
        return cls(cap) if vtc.contended(time.monotonic(), unfinished) else cls()

    def take(self, num_new: int) -> int:
        """``num_new`` tokens to schedule, cut to what is left when they are a prompt chunk
        (more than one token); a decode's token is never cut."""
        if num_new > 1:
            num_new = int(min(num_new, self.left))
            self.left -= num_new
        return num_new
