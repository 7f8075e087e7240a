"""Steps inside the step in flight: a tenant's new request does not wait for another tenant's
long step to end.

Why: under the fair policy a tenant that returns from idle goes first at the next step
(fair_share.py), but the step in flight when its request arrives still runs to its end. On a
CPU one step of a flood's prompt chunks takes 12-17 ms on the tiny model and seconds on a big
one, while the newcomer's own prompt takes 1-2 ms: its time to first token was mostly that wait
(issue 26: 11 ms under a flood against 4 ms idle, p99 29 ms).

How: the model runner calls a hook between two layers of a step, and between the prompts of
one layer's attention (``AttentionMetadata.checkpoint``). The service loop's hook takes the
new requests the Redis reader has queued (nothing else: aborts and adapter changes wait for
the end of the step, since they may free blocks the step is writing), adds them to the engine
and asks the scheduler for a step of its own made of those that may run now
(``Scheduler.schedule_inside``). That step runs to its first tokens, which are published at
once; then the paused step resumes. Nothing the paused step reads or writes changes: the
nested step writes only its own requests' new KV blocks, and its inputs, attention state and
outputs are its own.

Who may run inside (``Scheduler.schedule_inside``), all of:
- its tenant is back from idle: nothing else of it waits or runs. Tenants with work under way
  keep the plain fair order, so the weighted shares between backlogged tenants are untouched;
- its lane (class, tenant counter) ranks above every lane of the step in flight: a tenant back
  from idle is lifted just under the backlogged ones, so it does unless the step is of a
  better class;
- its whole uncached prompt fits ``fair_step_tokens`` (a short request; long ones would make the
  paused step wait as long as the newcomer did), without an adapter (loading one could evict a
  slot the paused step uses) or a grammar;
- none of its prefix-cache hits is a block the step in flight is writing (a block enters the
  cache when scheduled, before its KV exists), and no running prefill is about to compute its
  next block (prefix_dedup.py: it waits to take it from the cache);
- the batch holds at most ``max_num_seqs`` sequences before it: it may go one over, which the
  next steps absorb by admitting nothing until a sequence finishes.

Only on a CPU: a GPU step's kernels are queued ahead of the Python code that launches them, so
a nested step would queue behind the step in flight anyway (it would need its own stream).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.core.block_pool import KVCacheBlock
    from engine.core.fair_share import VirtualTokenCounter
    from engine.core.scheduler_output import SchedulerOutput
    from engine.request import Request


class InsideStep:
    """What the step in flight (``in_step``) is doing, as far as a nested step must know."""

    def __init__(self, in_step: SchedulerOutput, fair: VirtualTokenCounter, block_size: int):
        self.fair = fair
        requests = in_step.scheduled_requests
        # The best rank among the step's lanes: a newcomer must rank above it.
        self.bar = min((fair.rank(r) for r in requests), default=None)
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
