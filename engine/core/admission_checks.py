"""Checks on the head of the waiting queue before admission, for the scheduler
(engine/core/scheduler.py): its LoRA adapter still loaded, its grammar compiled. A request that
cannot run any more is dropped: ended as aborted, reported by the step's ``dropped_requests``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from engine.request import RequestStatus

if TYPE_CHECKING:
    from engine.core.scheduler import Scheduler
    from engine.core.scheduler_output import SchedulerOutput
    from engine.request import Request

logger = logging.getLogger(__name__)


def adapter_available(sched: Scheduler, request: Request, out: SchedulerOutput) -> bool:
    """False, after ending it as aborted, if the head request's adapter was unloaded."""
    if sched.lora is not None and sched.lora.knows(request.adapter):
        return True
    return drop_head(sched, request, out, f"adapter {request.adapter.name} unloaded")


def grammar_ready(sched: Scheduler, request: Request, out: SchedulerOutput, skipped: list) -> bool:
    """False while the head request's grammar compiles (it keeps its queue place, the
    requests behind it go ahead), or after ending it because its grammar failed."""
    grammar = request.grammar
    if not grammar.ready(request.output_token_ids):
        skipped.append(sched.waiting.pop())
        return False
    if not grammar.error:
        return True
    request.error = grammar.error
    return drop_head(sched, request, out, grammar.error)


def drop_head(sched: Scheduler, request: Request, out: SchedulerOutput, reason: str) -> bool:
    """End the head waiting request as aborted, ``reason`` in the log; False."""
    sched.waiting.pop()
    request.status = RequestStatus.FINISHED_ABORTED
    del sched.requests[request.request_id]
    out.dropped_requests.append(request)
    logger.info("request %s dropped: %s", request.request_id, reason)
    return False
