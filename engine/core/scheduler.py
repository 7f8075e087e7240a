"""Continuous-batching scheduler with chunked prefill and preemption by recompute.

Every step shares one token budget (``max_num_batched_tokens``) between running requests
(decodes and unfinished prefill chunks, served first) and waiting requests (admitted in queue
order while budget, sequence slots and KV blocks last). When a running request cannot get a
block, the lowest-ranked running request is preempted: its blocks are freed and it goes back to
the waiting queue to be recomputed later (its full blocks usually survive in the prefix cache).
A request alone always fits, because the KV cache holds at least ``max_model_len`` tokens, so
the scheduler never deadlocks and never drops a request.

LoRA: at most ``max_loras`` distinct adapters run at once (the device slots). A waiting request
whose adapter cannot get a slot now is skipped, not blocking the requests behind it, and keeps
its place in the queue. A request holds its adapter from admission until it finishes or is
preempted. A waiting request whose adapter was unloaded meanwhile ends as aborted.

Structured outputs (engine/structured/): a request whose grammar is still compiling is skipped
the same way; one whose grammar failed ends as aborted with the error. After each sampled
token the grammar advances, and a grammar that is complete ends the request ("stop").
Prefix dedup (engine/core/prefix_dedup.py): a request whose next missing block a running prefill
will compute is skipped the same way, to take it from the prefix cache, not compute it twice.

Speculative decoding (engine/spec_decode/, docs/kernels.md): a decoding request may be
scheduled for 1 + draft tokens; its accepted drafts and one sampled token are appended (each
checked for a stop), and the rejected drafts' KV blocks are freed.

Steps inside a step (engine/core/step_preemption.py): a tenant with no other prompt work (back
from idle, or only decoding) may run its short request while the step in flight is paused
between two layers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from engine.core.admission_checks import adapter_available, grammar_ready
from engine.core.block_hash import update_block_hashes
from engine.core.fair_share import FairQueue, StepLimits, VirtualTokenCounter, yield_victim
from engine.core.kv_cache_manager import KVCacheManager
from engine.core.output_tokens import append_output_tokens, ends_at_pending
from engine.core.prefix_dedup import InFlightBlocks
from engine.core.request_queue import lowest_ranked, make_queue
from engine.core.scheduler_output import ModelRunnerOutput, SchedulerOutput
from engine.core.step_preemption import no_other_prompt_work, num_riders
from engine.request import Request, RequestStatus

if TYPE_CHECKING:
    from engine.config import EngineConfig
    from engine.lora.manager import LoraManager
    from engine.spec_decode import Speculator

logger = logging.getLogger(__name__)


class Scheduler:
    def __init__(
        self,
        config: EngineConfig,
        *,
        num_blocks: int,
        max_model_len: int,
        eos_token_ids: Iterable[int] = (),
        lora: LoraManager | None = None,
        speculator: Speculator | None = None,
    ) -> None:
        config.check_schedulable(num_blocks=num_blocks, max_model_len=max_model_len)
        self.config = config
        self.block_size = config.block_size
        self.max_model_len = max_model_len
        self.eos_token_ids = frozenset(eos_token_ids)
        self.kv_cache = KVCacheManager(num_blocks, config.block_size, config.enable_prefix_caching)
        self.in_flight = InFlightBlocks(self.kv_cache)  # blocks prefills have yet to compute
        # The fair policy's counters (engine/core/fair_share.py); None under fcfs/priority.
        self.fair = VirtualTokenCounter() if config.scheduling_policy == "fair" else None
        self.waiting = FairQueue(self.fair) if self.fair else make_queue(config.scheduling_policy)
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self.num_preemptions = 0
        self.num_steps_inside = 0  # steps run inside a paused one (step_preemption.py)
        self.prefix_cache_queries = self.prefix_cache_hits = 0
        self.prompt_tokens_total = self.generation_tokens_total = 0
        self.lora = lora  # None when the model cannot serve adapters
        self._lora_holders: set[str] = set()  # ids of requests holding their adapter
        self.speculator = speculator  # None: speculative decoding is off
        self._limits = StepLimits()  # what this step may still compute, set by schedule()

    # -- admission and removal -------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"request id {request.request_id!r} is already in the scheduler")
        if self.config.enable_prefix_caching:
            update_block_hashes(request, self.block_size)
        request.status = RequestStatus.WAITING
        if self.speculator is not None:
            self.speculator.attach(request)
        request.timestamps.queued = time.monotonic()
        if self.fair is not None:
            self.fair.on_arrival(request)
        self.requests[request.request_id] = request
        self.waiting.add(request)

    def finish_requests(self, request_ids: Iterable[str], status: RequestStatus) -> list[Request]:
        """End waiting or running requests now (abort); their blocks are freed at once."""
        finished = []
        for rid in request_ids:
            request = self.requests.get(rid)
            if request is None or request.is_finished:
                continue
            running = request.status == RequestStatus.RUNNING
            (self.running if running else self.waiting).remove(request)
            request.status = status
            self._free(request)
            finished.append(request)
        return finished

    def _free(self, request: Request) -> None:
        if self.speculator is not None:
            self.speculator.on_finished(request)
        if self.fair is not None:
            self.fair.on_leave(request)
        self._release_adapter(request)
        self.kv_cache.free(request)
        del self.requests[request.request_id]

    def _release_adapter(self, request: Request) -> None:
        if request.request_id in self._lora_holders:
            self._lora_holders.discard(request.request_id)
            self.lora.release(request.adapter)

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running)

    # -- one step ----------------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput(block_rows=self.kv_cache.block_rows)
        budget = self.config.max_num_batched_tokens
        self._limits = StepLimits.for_step(self.fair, self.waiting, self.running, self.config)
        # A full batch makes room for a waiting tenant under its share (fair policy only).
        if victim := yield_victim(self.fair, self.waiting, self.running, self.config):
            self._preempt(victim, out)
        num_yielded = len(out.preempted_requests)

        # Running requests first: decodes and the next chunk of unfinished prefills (fair policy:
        # in rank order; prefills of lanes over the best waiting request's after admission).
        if self.speculator is not None:
            self.speculator.begin_step(len(self.running))
        ahead = self.fair.in_rank_order(self.running) if self.fair else list(self.running)
        behind, bar = [], None
        if self.fair is not None and self.waiting:
            head = self.waiting.peek()
            ahead, behind = self.fair.split_running(ahead, head)
            self.in_flight.put_holder_ahead(head, ahead, behind)
            bar = min(map(self.fair.rank, behind), default=None)  # the lanes over head's
        budget = self._schedule_running(ahead, out, budget)
        self.in_flight.begin_step(out.running_requests + behind)  # the prefills going on

        # Then waiting requests, unless this step already had to preempt (no room to grow).
        if len(out.preempted_requests) == num_yielded:
            budget = self._admit_waiting(out, budget, bar)
        if bar is None or not out.new_requests:  # else they wait: see fair_share.py, "Admission"
            budget = self._schedule_running(behind, out, budget)

        out.total_num_scheduled_tokens = self.config.max_num_batched_tokens - budget
        for request in out.scheduled_requests:
            out.block_tables[request.request_id] = self.kv_cache.get_block_ids(request.request_id)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("scheduled %s, %d waiting", out.summary(), len(self.waiting))
        return out

    def _schedule_running(self, requests: list[Request], out: SchedulerOutput, budget: int) -> int:
        """Schedule the next tokens of running ``requests`` in order while budget lasts,
        preempting others when blocks run out; returns the budget left."""
        num_tokens = out.num_scheduled_tokens
        for request in requests:
            if budget <= 0:
                break
            if request.status != RequestStatus.RUNNING or request.request_id in num_tokens:
                continue  # preempted meanwhile, or re-admitted already this step
            if request.num_pending_tokens and ends_at_pending(request, self.max_model_len):
                continue  # its last token is in flight: nothing after it is wanted
            num_left = request.num_tokens + request.num_pending_tokens - request.num_computed_tokens
            num_new = self._limits.take(request, min(num_left, budget))
            if num_new <= 0:
                continue  # the step's prompt tokens, or its share of batch lines, are spent
            if request.spec is not None:  # draft tokens to verify with this decode
                num_new += self.speculator.propose(request, budget - num_new, self.kv_cache)
            budget += self._make_room(request, num_new, out)
            if request.status != RequestStatus.RUNNING:
                break  # it was the lowest-ranked request itself: nothing after it fits either
            out.running_requests.append(request)
            num_tokens[request.request_id] = num_new
            self._charge(request, num_new)
            budget -= num_new
        return budget

    def _admit_waiting(self, out: SchedulerOutput, budget: int, bar: tuple | None = None) -> int:
        now = time.monotonic()
        skipped: list[Request] = []  # for a LoRA slot, a grammar or a prefill: keep their place
        returned = False  # admitted a returning tenant's whole prompt: its time to first token
        riders = num_riders(self.running)  # seats beyond max_num_seqs (step_preemption.py)
        while self.waiting and budget > 0 and len(self.running) - riders < self.config.max_num_seqs:
            request = self.waiting.peek()
            if request.num_pending_tokens:  # preempted while its last step was in flight
                skipped.append(self.waiting.pop())
                continue
            if bar is not None and out.new_requests and self.fair.rank(request) >= bar:
                break  # a lane whose prefills this step leaves out (fair_share.py, "Admission")
            returning = self.fair is not None and no_other_prompt_work(self, request)
            if returned and not returning:
                break  # nor does it admit other lanes' prompts (fair_share.py, "Admission")
            if request.adapter is not None:
                if not adapter_available(self, request, out):
                    continue
                if not self.lora.can_hold(request.adapter):  # all max_loras slots are held
                    skipped.append(self.waiting.pop())
                    continue
            if request.grammar is not None and not grammar_ready(self, request, out, skipped):
                continue
            hits, num_hit_tokens = self.kv_cache.get_computed_blocks(request)
            num_new = request.num_tokens - num_hit_tokens
            if num_new > budget:
                if not self.config.enable_chunked_prefill:
                    break  # whole prompts only: wait for a step with enough budget
                num_new = budget
            if self._limits.prompt_tokens > 0 and self.in_flight.defers(request, len(hits)):
                skipped.append(self.waiting.pop())
                continue
            num_new = self._limits.take(request, num_new)  # 0: no more batch lines this step
            if num_new <= 0 or self.kv_cache.allocate_slots(request, num_new, hits) is None:
                break
            self.waiting.pop()
            if request.adapter is not None:
                self.lora.hold(request.adapter)
                self._lora_holders.add(request.request_id)
            self.start(request, out, num_new, num_hit_tokens, now)
            budget -= num_new
            returned = returned or (returning and num_new == request.num_tokens - num_hit_tokens)
        for request in reversed(skipped):
            self.waiting.prepend(request)
        return budget

    def start(
        self, request: Request, out: SchedulerOutput, num_new: int, num_hit_tokens: int, now: float
    ) -> None:
        """Make the admitted ``request`` (out of the waiting queue, its slots allocated) run
        ``num_new`` tokens after its ``num_hit_tokens`` cached ones in the step ``out``."""
        if request.num_cached_tokens < 0:  # first admission, not a resume
            request.num_cached_tokens = num_hit_tokens
            self.prefix_cache_queries += request.num_tokens
            self.prefix_cache_hits += num_hit_tokens
            self.prompt_tokens_total += request.num_prompt_tokens
        if request.timestamps.scheduled is None:
            request.timestamps.scheduled = now
        request.num_computed_tokens = num_hit_tokens
        request.status = RequestStatus.RUNNING
        request.rides = False  # schedule_inside marks its own
        self.running.append(request)
        out.new_requests.append(request)
        out.num_scheduled_tokens[request.request_id] = num_new
        self._charge(request, num_new)

    def _make_room(self, request: Request, num_new: int, out: SchedulerOutput) -> int:
        """Allocate slots for ``request``, preempting others until it fits or is preempted;
        returns the token budget given back by preempted requests already scheduled this step."""
        refund = 0
        policy = self.config.scheduling_policy
        while self.kv_cache.allocate_slots(request, num_new) is None:
            fair = self.fair
            victim = fair.victim(self.running) if fair else lowest_ranked(self.running, policy)
            refund += self._preempt(victim, out)
            if victim is request:
                break
        return refund

    def _charge(self, request: Request, num_new: int) -> None:
        if self.fair is not None:  # the fair policy's virtual counter (fair_share.py)
            self.fair.charge(request, request.num_computed_tokens + num_new)

    def _preempt(self, request: Request, out: SchedulerOutput) -> int:
        self.running.remove(request)
        self._release_adapter(request)
        refund = out.num_scheduled_tokens.pop(request.request_id, 0)
        if refund:  # already scheduled earlier in this step (priority, fair policy): undo it
            scheduled = out.new_requests if request in out.new_requests else out.running_requests
            scheduled.remove(request)
            self.kv_cache.free(request, num_written_tokens=request.num_computed_tokens)
        else:
            self.kv_cache.free(request)
        request.num_computed_tokens = 0
        request.status = RequestStatus.PREEMPTED
        self.waiting.prepend(request)
        self.num_preemptions += 1
        out.preempted_requests.append(request)
        logger.debug("preempted %s", request.request_id)
        return refund

    # -- after the forward pass --------------------------------------------------------------

    def update_from_output(
        self, out: SchedulerOutput, model_out: ModelRunnerOutput, *, committed: bool = False
    ) -> list[Request]:
        """Advance counters (unless ``commit_launched`` did: ``committed``), append sampled
        tokens, finish stopped requests; returns those with new tokens or finished."""
        sampled = model_out.sampled_token_ids
        updated: list[Request] = []
        caching = self.config.enable_prefix_caching
        now = time.monotonic()
        for request in out.scheduled_requests:
            rid = request.request_id
            if not committed:
                request.num_computed_tokens += out.num_scheduled_tokens[rid]
            elif request.is_finished:
                continue  # aborted, or stopped by the step before: this row was wasted
            if rid in model_out.prompt_logprobs and request.prompt_logprobs is not None:
                request.prompt_logprobs.extend(model_out.prompt_logprobs[rid])
            token = sampled.get(rid)
            if token is None:
                continue
            if committed:
                request.num_pending_tokens -= 1
            tokens, logprobs = [token], [model_out.logprobs.get(rid)]
            outcome = model_out.draft_outcomes.get(rid)
            if outcome is not None:
                tokens[:0], logprobs[:0] = outcome.accepted_token_ids, outcome.accepted_logprobs
                request.num_computed_tokens -= outcome.num_rejected
                self.kv_cache.free_excess_blocks(request, request.num_computed_tokens)
                self.speculator.on_verified(request, outcome)
            status, appended = append_output_tokens(
                request,
                tokens,
                logprobs,
                now,
                eos_token_ids=self.eos_token_ids,
                max_model_len=self.max_model_len,
            )
            self.generation_tokens_total += appended
            if caching:
                update_block_hashes(request, self.block_size)
            if status is not None:
                queue = self.running if request.status == RequestStatus.RUNNING else self.waiting
                queue.remove(request)  # waiting: preempted while its committed step ran
                request.status = status
                self._free(request)
            updated.append(request)
        return updated
