"""Async scheduling: the host schedules and queues step N+1 while the device computes step N.

Without it a GPU waits on the host for part of every step: the step's tokens are read back,
the requests advance (stop checks, blocks, deltas, detokenizing), the next step is
scheduled and its inputs built, and only then is it queued. With it, ``LLMEngine.step``
runs in this order:

1. schedule step N+1 as though step N had already sampled: ``commit_launched`` counted N's
   tokens as computed when N was queued, and each token it samples as *pending*
   (``Request.num_pending_tokens``), so a decoding request asks for one more token;
2. queue N+1 (``ModelRunner.launch``): a pending token is copied into N+1's inputs on the
   device, from N's sampled tokens, so nothing waits for N;
3. read N's tokens (``LaunchedStep.read``: an event recorded behind N) and update the
   requests, while the device computes N+1; return N's deltas.

A request that N ended (a stop token, EOS, an abort) has had one row in N+1 for nothing,
which is dropped when N+1 is read; one whose length ends at its pending token (max_tokens,
the context) is not scheduled again. Output reaches the caller one step's host time later
than it would synchronously, and each GPU step no longer waits for the host's.

A step runs synchronously, after the one in flight is read, where the next step needs
tokens on the host: a pending token under a grammar (the next mask), and speculative decoding
with few enough running requests to propose drafts (the n-gram lookup), as well as when the
step preemption hook is set (CPU only). Penalties do not need it: the pending token's share
is applied on the device, from the step in flight's tokens (engine/sample/penalties.py).
"""

from __future__ import annotations

from engine.core.scheduler import Scheduler
from engine.core.scheduler_output import SchedulerOutput
from engine.worker.launched_step import LaunchedStep
from engine.worker.model_runner import ModelRunner


class AsyncSteps:
    def __init__(self, scheduler: Scheduler, runner: ModelRunner) -> None:
        self.scheduler = scheduler
        self.runner = runner
        self.in_flight: LaunchedStep | None = None
        self.num_launched_behind = 0  # steps queued while another was in flight

    def must_drain(self) -> bool:
        """Whether the next step needs the tokens of the one in flight on the host."""
        if self.in_flight is None:
            return False
        if self.runner.preemption_hook is not None:
            return True
        spec = self.scheduler.speculator
        if spec is not None and len(self.scheduler.running) <= spec.max_num_seqs:
            return True  # it would propose drafts from every request's tokens
        return any(
            r.num_pending_tokens and r.grammar is not None for r in self.in_flight.sample_requests
        )

    def can_launch(self, sched_out: SchedulerOutput) -> bool:
        """Whether ``sched_out`` can be queued behind the step in flight: not empty, no
        draft tokens to verify, no preemption hook."""
        if sched_out.is_empty or self.runner.preemption_hook is not None:
            return False
        return not any(
            r.spec is not None and r.spec.draft_token_ids for r in sched_out.running_requests
        )

    def launch(self, sched_out: SchedulerOutput) -> LaunchedStep | None:
        """Queue ``sched_out`` behind the step in flight, which is returned to be read (None
        if there was none)."""
        previous = self.in_flight
        self.in_flight = self.runner.launch(sched_out, previous)
        commit_launched(sched_out)
        if previous is not None:
            self.num_launched_behind += 1
        return previous

    def take(self) -> LaunchedStep | None:
        """The step in flight, to be read now (None if there is none)."""
        launched, self.in_flight = self.in_flight, None
        return launched


def drop_finished(sched_out: SchedulerOutput) -> None:
    """Take requests that ended after ``sched_out`` was scheduled (the step in flight stopped
    them) out of it, before it runs synchronously."""
    for scheduled in (sched_out.running_requests, sched_out.new_requests):
        for request in [r for r in scheduled if r.is_finished]:
            scheduled.remove(request)
            num_tokens = sched_out.num_scheduled_tokens.pop(request.request_id)
            sched_out.block_tables.pop(request.request_id, None)
            sched_out.total_num_scheduled_tokens -= num_tokens


def commit_launched(sched_out: SchedulerOutput) -> None:
    """The step is queued and its results are not read yet: count its tokens as computed
    now, and the token each request samples as pending, so that the next step can be
    scheduled behind it (``Scheduler.update_from_output(..., committed=True)`` reads it)."""
    for request in sched_out.scheduled_requests:
        request.num_computed_tokens += sched_out.num_scheduled_tokens[request.request_id]
        if request.num_computed_tokens == request.num_tokens + request.num_pending_tokens:
            request.num_pending_tokens += 1
