"""Steps inside the step in flight: a tenant's new request does not wait for another tenant's
long step to end.

Why: under the fair policy a tenant that returns from idle goes first at the next step
(fair_share.py), but the step in flight when its request arrives still runs to its end. On a
CPU one step of a flood's prompt chunks takes 12-17 ms on the tiny model and seconds on a big
one, while the newcomer's own prompt takes 1-2 ms: its time to first token was mostly that wait
(issue 26: 11 ms under a flood against 4 ms idle, p99 29 ms).

How: the model runner calls a hook four times in each layer of a step (before it, after its
QKV projection, after its attention, inside its MLP: engine/models/decoder.py) and between the
prompts of one layer's attention (``AttentionMetadata.checkpoint``). The service loop's hook
takes the new requests the Redis reader has queued (nothing else: aborts and adapter changes
wait for the end of the step, since they may free blocks the step is writing), adds them to
the engine and asks the scheduler for a step of its own made of those that may run now
(``schedule_inside``). That step runs to its first tokens, which are published at once; then
the paused step resumes. Nothing the paused step reads or writes changes: the
nested step writes only its own requests' new KV blocks, and its inputs, attention state and
outputs are its own.

Who may run inside (``schedule_inside``), all of:
- it is its lane's only prompt work: nothing else of the tenant waits in its service class,
  and the tenant's running requests of that class only decode. A tenant streaming short
  requests back to back has the last one still decoding when the next arrives; under a flood
  that decode advances one token per step of the flood, so "nothing running" made every such
  request wait for the step in flight: 100-200 ms of its time to first token through the API
  on the 2-core VM, 2026-11-26. The tenant's work in another class does not count: with its
  4,000-line batch running, its interactive requests waited about 1 ms for each batch step in
  flight, against 1.5 ms for their own prompts (2026-11-26). Lanes with prompt work under way
  keep the plain fair order, so the weighted shares between backlogged tenants are untouched;
- its lane (class, tenant counter) ranks above every lane whose prompt work the step in flight
  computes (the step's decodes set no bar: a nested step holds them back by a short prompt's
  time): a tenant back from idle is lifted just under the backlogged ones, so it does unless
  the step is of a better class;
- its whole uncached prompt fits ``fair_step_tokens`` (a short request; long ones would make the
  paused step wait as long as the newcomer did), without an adapter (loading one could evict a
  slot the paused step uses) or a grammar;
- none of its prefix-cache hits is a block the step in flight is writing (a block enters the
  cache when scheduled, before its KV exists), and no running prefill is about to compute its
  next block (prefix_dedup.py: it waits to take it from the cache);
- a seat is free, or fewer than ``max_riders`` requests admitted this way still run. Those
  ride in seats beyond ``max_num_seqs`` until they finish: admissions and the fair policy's
  "batch full" count the batch without them. Counted against it, a tenant streaming short
  requests under a flood held one or two of its eight seats at all times (each of its
  requests decodes one token per flood step), and the flood lost a tenth of its throughput to
  a tenant asking for a hundredth of the tokens (2026-11-26).

Between two steps the same requests run the same way, as a step of their own ahead of the
batch's next one (``LLMEngine.step_inside(between_steps=True)``), when other requests are
running, a seat is free (no riders here) and it ranks above every other lane's waiting or
running prompt work (the fair order would take it first anyway: shares are untouched): in
the batch's step a short prompt's first token would also wait for every running request's
decode. A conversation's next turn (40 new tokens after 1,000 cached) beside eight decoding
requests on the tiny model, one CPU thread: its first token 2.8 ms after it arrived against
5.0 in the batch's step, the eight's next token 5.2 ms against 5.0 (bench/step_ahead.py,
2026-11-27): the batch's step loses the newcomer's work as it waits for it.

Only on a CPU: a GPU step's kernels are queued ahead of the Python code that launches them, so
a nested step would queue behind the step in flight anyway (it would need its own stream).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from engine.core.scheduler_output import SchedulerOutput
from engine.request import RequestStatus

if TYPE_CHECKING:
    from engine.core.block_pool import KVCacheBlock
    from engine.core.fair_share import VirtualTokenCounter
    from engine.core.scheduler import Scheduler
    from engine.request import Request


class InsideStep:
    """What the step in flight (``in_step``) is doing, as far as a nested step must know."""

    def __init__(self, in_step: SchedulerOutput, fair: VirtualTokenCounter, block_size: int):
        self.fair = fair
        requests = in_step.scheduled_requests
        # The best rank among the lanes whose prompts the step computes: a newcomer must rank
        # above it. Decodes set no bar: a nested step holds them back by a short prompt's time.
        self.bar = min(
            (fair.rank(r) for r in requests if in_step.num_scheduled_tokens[r.request_id] > 1),
            default=None,
        )
        self.written: set[int] = set()  # block ids whose KV the step in flight writes
        for r in requests:
            start = r.num_computed_tokens  # advanced only after the step
            end = start + in_step.num_scheduled_tokens[r.request_id]
            ids = in_step.block_tables[r.request_id]
            self.written.update(ids[start // block_size : -(-end // block_size)])

    def ranks_above(self, request: Request) -> bool:
        return self.bar is None or self.fair.rank(request) < self.bar

    def reads_unwritten(self, hits: list[KVCacheBlock]) -> bool:
        """True if a prefix-cache hit is a block the step in flight has yet to write."""
        return any(block.block_id in self.written for block in hits)


def schedule_inside(
    sched: Scheduler, candidates: list[Request], in_step: SchedulerOutput
) -> SchedulerOutput:
    """A step of its own for those of ``candidates`` (requests just added to ``sched``) that
    may run while the step ``in_step`` is paused between two layers (see the module's
    docstring for who may); empty when none may. Fair policy only."""
    out = SchedulerOutput(block_rows=sched.kv_cache.block_rows)
    if sched.fair is None:
        return out
    # The cheap tests first: under one tenant's load every new request fails them.
    candidates = [
        r
        for r in candidates
        if r.status == RequestStatus.WAITING
        and sched.requests.get(r.request_id) is r  # not a sample held back by the engine
        and r.adapter is None
        and r.grammar is None
        and no_other_prompt_work(sched, r)
    ]
    if not candidates:
        return out
    config, kv_cache = sched.config, sched.kv_cache
    budget = config.fair_step_tokens or config.max_num_batched_tokens
    inside = InsideStep(in_step, sched.fair, sched.block_size)
    between_steps = not in_step.scheduled_requests
    prefills = [r for r in sched.running if r.has_prompt_work]
    sched.in_flight.begin_step(prefills)  # schedule() starts its own map again
    now = time.monotonic()
    riders = num_riders(sched.running)
    for request in candidates:
        rides = len(sched.running) - riders >= config.max_num_seqs  # else a seat is free
        # Between two steps only into a free seat: a rider there would be a seat the fair
        # order did not give (a weight-3 tenant's requests rode often enough to take 1:3.44
        # of the output tokens against a weight-1 tenant's instead of 1:3).
        if rides and (between_steps or riders >= max_riders(config)):
            break
        if between_steps:  # ahead only of what the fair order would take after it
            inside.bar = next_in_fair_order(sched, request, ahead=out.new_requests)
        if not inside.ranks_above(request) or not no_other_prompt_work(sched, request):
            continue  # (a request admitted just before may be its tenant's)
        hits, num_hit_tokens = kv_cache.get_computed_blocks(request)
        num_new = request.num_tokens - num_hit_tokens
        if (
            num_new > budget
            or inside.reads_unwritten(hits)
            or sched.in_flight.holder(request, len(hits)) is not None
            or kv_cache.allocate_slots(request, num_new, hits) is None
        ):
            continue
        sched.waiting.remove(request)
        sched.start(request, out, num_new, num_hit_tokens, now)
        request.rides = rides
        riders += rides
        budget -= num_new
    if out.new_requests and not between_steps:
        sched.num_steps_inside += 1
    out.total_num_scheduled_tokens = sum(out.num_scheduled_tokens.values())
    for request in out.new_requests:
        out.block_tables[request.request_id] = kv_cache.get_block_ids(request.request_id)
    return out


def next_in_fair_order(
    sched: Scheduler, request: Request, ahead: list[Request]
) -> tuple[int, float] | None:
    """The best rank among the other lanes' prompt work, waiting or running (but ``ahead``,
    the newcomers already in the step ahead): a newcomer that ranks above it is what the fair
    order would schedule first anyway, so running it ahead of the batch's next step changes no
    tenant's share, only when its first token comes."""
    fair, own = sched.fair, (request.service_class, request.tenant)
    # By lane, not by request: a flood's hundred waiting requests cost one lookup each.
    ranks = [(c, fair.counter(t)) for c, t in sched.waiting.lanes() if (c, t) != own]
    ranks += [fair.rank(r) for r in sched.running if r.has_prompt_work and r not in ahead]
    return min(ranks, default=None)


def max_riders(config) -> int:
    """How many requests admitted inside a step may run beyond ``max_num_seqs`` at once."""
    return max(1, config.max_num_seqs // 4)


def num_riders(running: list[Request]) -> int:
    """The running requests that were admitted inside a step (they take no seat)."""
    return sum(1 for r in running if r.rides)


def no_other_prompt_work(sched: Scheduler, request: Request) -> bool:
    """True if the waiting ``request`` is its lane's only one with prompt work: nothing else of
    the tenant waits in its service class, and the tenant's running requests of that class
    only decode. The tenant's work in another class does not count: its batch goes after its
    interactive requests anyway."""
    lane = (request.service_class, request.tenant)
    return sched.waiting.num_waiting_in_lane(*lane) == 1 and not any(
        (r.service_class, r.tenant) == lane and r.has_prompt_work for r in sched.running
    )
