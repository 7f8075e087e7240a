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
tenants (less one token, so that it goes first among equals, unless none of them has been
served yet: tenants arriving together keep their arrival order), so idle time banks no credit;
when nobody is backlogged it is lifted to the highest counter seen, so history does not carry
across an idle engine. The queue always serves someone when anyone waits (work-conserving):
the counters only choose who.

Shared steps: a step whose prompt work comes from two lanes or more (a lane: one tenant's
requests of one service class; a waiting request, or a running one with more than one token
left to compute) computes at most ``fair_step_tokens`` prompt tokens (decodes are never
capped). Steps with one lane's prompt work (a flood alone, or a flood while the short request
only decodes) keep the full budget: capping every step while two tenants were merely active
cost a fifth of the throughput on a small model, whose steps are mostly fixed cost, and half
of it on the tiny model at 256 tokens (2026-11-25).

Admission: a waiting request of a tenant under its share is admitted before the running
prompt chunks of lanes ranked above it (class, then counter), and the step that admits it
computes none of those chunks and admits nothing ranked above it: that step is its time to
first token, so it carries only its own prompt, its peers' and the running decodes. Sharing it
with the flood's chunks, even cut to ``fair_step_tokens``, made it 5-8 ms on the tiny model
against 1-2 ms alone. The chunks lose one step per such admission. The same holds for a
flood still waiting, none of it running yet (it has just arrived): once a step admits the whole
prompt of a tenant with no other prompt work (back from idle, or only decoding), it admits only
other such requests after it. Such a short request need not even wait for the step in flight
to end: on a CPU it runs as a step of its own between two of that step's layers
(engine/core/step_preemption.py).

Batch beside interactive: while interactive requests keep arriving (one in the last
``INTERACTIVE_WINDOW_S``), a step computes at most ``batch_step_seqs`` batch-class requests;
the others keep their place and their KV and go on as those finish. Admission order alone put
an interactive request first, but its step still carried every running batch line: with 256
lines in flight on a small model a step took 40 ms, and the interactive TTFT was 4.4x its idle
value. With no interactive request about, batch work uses the whole batch (work-conserving).

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

from engine.core.step_preemption import num_riders

if TYPE_CHECKING:
    from engine.config import EngineConfig
    from engine.request import Request

# Service classes, best first; the index is the class rank the scheduler compares.
SERVICE_CLASSES = ("interactive", "batch")
INTERACTIVE = SERVICE_CLASSES.index("interactive")
INF = float("inf")  # a step limit that never binds
# How recently an interactive request must have arrived for batch lines to leave it short
# steps (users send a message every few seconds).
INTERACTIVE_WINDOW_S = 10.0
# A waiting tenant takes a running request's place only when the running request's tenant is
# this many weighted tokens over it (about one full step), so two backlogged tenants whose
# counters cross do not swap places every step.
PREEMPT_MARGIN_TOKENS = 2048.0
RETURN_EDGE_TOKENS = 1.0


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
        self.served: set[str] = set()  # tenants charged since they last came back from idle
        # Each tenant's requests in the scheduler (waiting or running), kept as they arrive
        # and leave: a flood's arrivals would each otherwise walk every unfinished request.
        self.backlog: dict[str, int] = {}
        self.last_interactive_at: float | None = None  # monotonic time of the latest arrival

    def counter(self, tenant: str) -> float:
        return self.counters.get(tenant, 0.0)

    def on_arrival(self, request: Request) -> None:
        """Count ``request`` in its tenant's backlog, and lift the tenant if it returns from
        idle (none of its requests waiting or running)."""
        if request.service_class == INTERACTIVE:
            self.last_interactive_at = request.timestamps.queued
        tenant, backlog = request.tenant, self.backlog
        backlogged = backlog.keys()  # before this request counts
        if tenant in backlog:
            backlog[tenant] += 1
            return
        self.served.discard(tenant)  # a new backlog of it begins
        floor = min((self.counter(t) for t in backlogged), default=None)
        if floor is None:
            floor = max(self.counters.values(), default=0.0)
        elif backlogged & self.served:
            # One token under: among equals, the tenant that had nothing waiting goes first.
            # Not under tenants not served yet (they arrived with it, in the same intake):
            # arrival order decides, and the intake adds the tenants with the fewest requests
            # first, so a short request that reaches the engine with a flood goes ahead of it,
            # as it would had it come a moment later.
            floor -= RETURN_EDGE_TOKENS
        self.counters[tenant] = max(self.counter(tenant), floor)
        backlog[tenant] = 1

    def on_leave(self, request: Request) -> None:
        """``request`` left the scheduler (finished or aborted; a preempted one stays)."""
        left = self.backlog[request.tenant] - 1
        if left:
            self.backlog[request.tenant] = left
        else:
            del self.backlog[request.tenant]

    def charge(self, request: Request, num_computed_after: int) -> None:
        """Charge the tokens ``request`` will have computed after this step that it was not
        charged for yet (recomputation after a preemption is free)."""
        num_new = num_computed_after - request.num_charged_tokens
        if num_new > 0:
            request.num_charged_tokens = num_computed_after
            self.counters[request.tenant] = self.counter(request.tenant) + num_new / request.weight
            self.served.add(request.tenant)

    def victim(self, running: list[Request]) -> Request:
        """The running request to preempt: worst class, most over-share tenant, latest
        arrival (lowest priority first among equals)."""
        return max(running, key=self._victim_key)

    def _victim_key(self, r: Request) -> tuple:
        return (r.service_class, self.counter(r.tenant), r.priority, r.timestamps.arrival or 0.0)

    def rank(self, request: Request) -> tuple[int, float]:
        """Where ``request``'s lane stands now: its class, then its tenant's counter."""
        return (request.service_class, self.counter(request.tenant))

    def split_running(self, running: list[Request], head: Request) -> tuple[list, list]:
        """Running requests to schedule before admitting ``head`` (the best waiting request),
        and after it: prompt chunks of tenants above ``head``'s (class, counter) wait until it
        is admitted, so a tenant under its share is not queued behind their prefills."""
        bar = self.rank(head)
        ahead, behind = [], []
        for r in running:
            late = r.has_prompt_work and self.rank(r) > bar
            (behind if late else ahead).append(r)
        return ahead, behind

    def in_rank_order(self, running: list[Request]) -> list[Request]:
        """``running`` lowest rank first (stable: arrival order within a tenant), so that a
        tenant under its share decodes before the prompt chunks of one over it take the budget."""
        return sorted(running, key=self.rank)

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

    def num_waiting_in_lane(self, service_class: int, tenant: str) -> int:
        """How many of ``tenant``'s requests of ``service_class`` wait."""
        return len(self._lanes.get((service_class, tenant), ()))

    def lanes(self) -> set[tuple[int, str]]:
        """The (service class, tenant) pairs that have a request waiting."""
        return set(self._lanes)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Request]:
        items = sorted(item for lane in self._lanes.values() for item in lane)
        return (item[3] for item in items)


class StepLimits:
    """What one step may still compute under the fair policy: prompt tokens (module docstring,
    "Shared steps") and batch-class requests ("Batch beside interactive"). Unlimited under the
    other policies."""

    def __init__(self, prompt_tokens: float = INF, batch_requests: float = INF) -> None:
        self.prompt_tokens, self.batch_requests = prompt_tokens, batch_requests

    @classmethod
    def for_step(
        cls,
        vtc: VirtualTokenCounter | None,
        waiting: FairQueue,
        running: Iterable[Request],
        config: EngineConfig,
    ) -> StepLimits:
        """``vtc`` is None under the other policies (``waiting`` is no FairQueue then)."""
        if vtc is None:
            return cls()
        return cls(_prompt_cap(waiting, running, config), _batch_cap(vtc, config))

    def take(self, request: Request, num_new: int) -> int:
        """How many of ``request``'s ``num_new`` tokens this step computes: a prompt chunk
        (more than one token) cut to the prompt tokens left, and none of a batch line once the
        step has its share of them; a decode's token is never cut otherwise."""
        if num_new > 1:
            num_new = int(min(num_new, self.prompt_tokens))
        if num_new > 0 and request.service_class != INTERACTIVE:
            if self.batch_requests <= 0:
                return 0
            self.batch_requests -= 1
        if num_new > 1:
            self.prompt_tokens -= num_new
        return num_new


def yield_victim(
    vtc: VirtualTokenCounter | None,
    waiting: FairQueue,
    running: list[Request],
    config: EngineConfig,
) -> Request | None:
    """When the batch is full, the running request that should yield its place to the best
    waiting request (``fairness_victim``); None otherwise, and always under the other policies
    (``vtc`` None)."""
    if vtc is None or len(running) - num_riders(running) < config.max_num_seqs or not waiting:
        return None
    return vtc.fairness_victim(waiting.peek(), running)


def _prompt_cap(waiting: FairQueue, running: Iterable[Request], config: EngineConfig) -> float:
    """``fair_step_tokens`` when the step's prompt work comes from two lanes or more."""
    cap = config.fair_step_tokens
    if not cap or not config.enable_chunked_prefill:
        return INF
    lanes = waiting.lanes()
    for request in running:
        if len(lanes) > 1:
            break
        if request.has_prompt_work:
            lanes.add((request.service_class, request.tenant))
    return cap if len(lanes) > 1 else INF


def _batch_cap(vtc: VirtualTokenCounter, config: EngineConfig) -> float:
    """``batch_step_seqs`` while an interactive request arrived within INTERACTIVE_WINDOW_S."""
    cap, last = config.batch_step_seqs, vtc.last_interactive_at
    if not cap or last is None or time.monotonic() - last >= INTERACTIVE_WINDOW_S:
        return INF
    return cap
