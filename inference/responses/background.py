"""Background responses: answered at once as ``queued``, then run on by this API process.

The generation was admitted before the answer (a 400 or 429 is still the request's own), so
the tenant's concurrency slot is held while it runs. A task runs it and beats every BEAT_S
seconds, marking the stored row alive; a beat that finds the row cancelled or deleted
cancels the generation (aborted in the engine, settled as such). The end, done or failed, is
written by the same storage as any response. If this process dies, its rows stop beating and
the next read fails them (controlplane/responses/background.py).

With ``stream``, the run keeps its events in a Redis stream (event_log.py) as it goes: the
request that started it streams them from there, and so can any later
``GET /v1/responses/{id}?stream=true``, from any API process.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from typing import Any

from asgiref.sync import sync_to_async

from controlplane.common.outages import DATA_OUTAGE_ERRORS
from controlplane.responses import background as rows
from inference.errors import error_from_exception
from inference.generation.use_case import Generation
from inference.responses import objects
from inference.responses.event_log import EventLogWriter
from inference.stored_answers import generation_events, whole_answer

logger = logging.getLogger(__name__)

# The tasks running now (the event loop keeps only weak references to tasks), and each
# response's generation, for a cancel that reaches the process running it.
_running: set[asyncio.Task] = set()
_work: dict[str, asyncio.Future] = {}


def cancel_here(response_id: str) -> None:
    """Stop a background response's generation now if this process runs it; another
    process's sees the cancel at its next beat."""
    work = _work.get(response_id)
    if work is not None:
        work.cancel()


async def start_background(generation: Generation) -> dict[str, Any]:
    """Store ``generation``'s response as queued, start running it, and answer that."""
    context = generation.plan.response
    queued = objects.response_object(
        context, model=generation.plan.model, status="queued", output=[]
    )
    try:
        await sync_to_async(rows.background_start)(
            tenant_id=context.tenant_id,
            key_prefix=context.key_prefix,
            response=queued,
            input_items=context.input_items,
        )
    except BaseException:
        await generation.settle(500)  # admitted, never run: its reservation goes back
        raise
    log = EventLogWriter(queued["id"]) if generation.plan.stream else None
    # In a context of its own: the request's holds Django's per-request thread for database
    # calls (ThreadSensitiveContext), which closes when the answer has gone out.
    task = asyncio.get_running_loop().create_task(
        _run(generation, queued, log), context=contextvars.Context()
    )
    _running.add(task)
    task.add_done_callback(_running.discard)
    return queued


async def _answer(generation: Generation, log: EventLogWriter | None) -> None:
    await generation.open()
    if log is None:
        await whole_answer(generation)  # the end written to the row (services)
        return
    events = generation_events(generation)  # the end written before the final event
    try:
        async for event in events:
            await log.append(event)
    finally:
        await events.aclose()


async def _beat(response_id: str) -> str | None:
    """The row marked alive; its status. The database away a moment stops nothing: the
    generation goes on, and the next beat tries again."""
    try:
        return await sync_to_async(rows.background_beat)(response_id)
    except DATA_OUTAGE_ERRORS as exc:
        logger.warning("background response %s: no heartbeat written (%s)", response_id, exc)
        return "in_progress"


async def _run(generation: Generation, queued: dict[str, Any], log: EventLogWriter | None):
    response_id = queued["id"]
    work = _work[response_id] = asyncio.ensure_future(_answer(generation, log))
    ended = "completed"
    try:
        await _beat(response_id)  # queued -> in_progress
        while not work.done():
            await asyncio.wait({work}, timeout=rows.BEAT_S)
            if work.done():
                break
            if await _beat(response_id) not in rows.RUNNING:  # cancelled or deleted
                work.cancel()
        await work
    except asyncio.CancelledError:
        ended = "cancelled"
        logger.info("background response %s cancelled", response_id)
    except Exception as exc:  # the engine refused or failed it: the client reads why
        ended = "failed"
        await _fail(generation, queued, exc, log)
    finally:
        del _work[response_id]
        if not work.done():
            work.cancel()
        if log is not None:
            await log.end(ended)
        # Settled already, unless the work was cancelled before it began: then it is here.
        await generation.settle(499)


async def _fail(
    generation: Generation, queued: dict[str, Any], exc: Exception, log: EventLogWriter | None
) -> None:
    error = error_from_exception(exc)
    failed = rows.failed_response(queued, code=error.code or error.type, message=error.message)
    try:
        await sync_to_async(rows.background_finish)(queued["id"], failed)
    except Exception:
        logger.exception("background response %s failed and could not be marked", queued["id"])
    if log is not None:
        await log.append(generation.formatter.event("response.failed", response=failed))
