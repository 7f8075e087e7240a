"""Request intake for the loop's ``drain_inputs`` phase: new requests into the engine, aborts
out of it."""

from __future__ import annotations

import logging
import time

from engine.service import convert
from engine.service.adapter_registry import AdapterRegistry
from engine.service.inbox import NewRequest
from engine.service.outbox import Outbox

logger = logging.getLogger(__name__)

# Aborts for requests this engine has not seen yet are remembered this long, for the race
# in which the abort overtakes its request between the Redis threads.
RECENT_ABORT_S = 60.0


class RequestIntake:
    def __init__(self, engine, outbox: Outbox, adapters: AdapterRegistry):
        self.engine = engine
        self.outbox = outbox
        self.adapters = adapters
        self.recent_aborts: dict[str, float] = {}

    def admit(self, event: NewRequest, *, draining: bool) -> None:
        """Add the request to the engine, or answer it at once if it cannot run here."""
        request = event.request
        request_id = request.request_id
        if request_id in self.recent_aborts:
            del self.recent_aborts[request_id]
            self.outbox.answer_without_running(event.entry_id, request, finish_reason="abort")
            return
        if draining:
            self.outbox.hand_back(event.entry_id, request)
            return
        if request_id in self.outbox.active:
            if self.outbox.active[request_id].request.frontend_id == request.frontend_id:
                # The same submission twice (a client's retry after a dropped connection):
                # the running copy answers it; this entry is only acknowledged.
                logger.warning("duplicate entry %s of request %s", event.entry_id, request_id)
                self.outbox.job.done.append(event.entry_id)
                return
            self.outbox.answer_without_running(
                event.entry_id, request, error=f"request id {request_id!r} is already running"
            )
            return
        try:
            params = convert.sampling_params(request.sampling)
            adapter = self.adapters.identity_for(request.adapter)
            # The engine orders by its monotonic clock; carry over the time spent queued.
            queued_for = max(0.0, time.time() - request.arrival_time)
            self.engine.add_request(
                request_id,
                request.prompt_token_ids,
                params,
                cache_salt=request.cache_salt or None,
                adapter=adapter,
                priority=request.priority,
                arrival_time=time.monotonic() - queued_for if request.arrival_time else None,
                resumed_output_tokens=request.resumed_output_tokens,
            )
        except (ValueError, TypeError) as exc:
            logger.info("request %s refused: %s", request_id, exc)
            self.outbox.answer_without_running(event.entry_id, request, error=str(exc))
            return
        self.outbox.track(event.entry_id, request)

    def abort(self, request_id: str) -> None:
        active = self.outbox.active.get(request_id)
        if active is None:
            self.recent_aborts[request_id] = time.monotonic()
            return
        self.engine.abort_request([request_id])
        self.outbox.abort_open_samples(active)

    def forget_old_aborts(self) -> None:
        if self.recent_aborts:
            cutoff = time.monotonic() - RECENT_ABORT_S
            for request_id in [k for k, t in self.recent_aborts.items() if t < cutoff]:
                del self.recent_aborts[request_id]
