"""The service loop's side of step preemption (engine/core/step_preemption.py): what runs when
the step in flight is paused between two layers, and ahead of the next step."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from engine.service.intake_order import first_slice, singles_and_rest

if TYPE_CHECKING:
    from engine.service.loop import EngineService

logger = logging.getLogger(__name__)

# A step computing fewer tokens takes no slice of a flood at its pauses: it ends within a few
# milliseconds anyway (a newcomer's prompt, a few decodes), and a slice (adding each request
# costs 0.16-1.2 ms: intake_order.py) would hold its first tokens back by as much again.
SHORT_STEP_TOKENS = 256


def between_layers(service: EngineService) -> None:
    """Take the new requests queued while the step computes, add them to the engine and run
    those that may as a step of their own, publishing their first tokens now. Only new
    requests: aborts and adapter changes may free blocks the paused step writes, so they wait
    in the inbox for the step's end."""
    if service.inbox.num_requests == 0 or service.draining:
        return
    try:
        # Tenants with one request in the batch first, and their step before the others are
        # added: a flood's requests in the same batch cannot run inside anyway (their tenant
        # has work under way), and adding a hundred of them took tens of milliseconds. Of
        # those, a slice now; a newcomer arriving meanwhile goes ahead of the rest.
        singles, rest = singles_and_rest(service.inbox.take_new_requests())
        added = [e.request.request_id for e in singles if service.admit(e.entry_id, e.request)]
        deltas = service.engine.step_inside(added) if added else []
        if service.engine.num_tokens_in_flight >= SHORT_STEP_TOKENS:
            now, later = first_slice(rest)  # the others at the next pause
        else:  # all at the end of this short step
            now, later = [], rest
        service.inbox.defer(later)
        for event in now:
            service.admit(event.entry_id, event.request)
    except Exception:
        # The paused step goes on; a request the failed step admitted is computed again by
        # the next one (its computed-token count only advances after a step).
        logger.exception("a step inside the step in flight failed; step preemption is off")
        service.engine.enable_step_preemption(None)
        return
    if deltas:
        service.num_steps += 1
    if deltas or service.job:
        service.publish(deltas)


def first_steps(service: EngineService, admitted: list[str]) -> None:
    """Between two steps: those of the requests just added (their ids) that could have run
    inside the step in flight run as a step of their own, ahead of the batch's next step,
    whose other requests' decodes would otherwise hold up their first tokens."""
    try:
        deltas = service.engine.step_inside(admitted, between_steps=True)
    except Exception:  # as between_layers: the next step computes them again
        logger.exception("a step ahead of the batch failed; step preemption is off")
        service.engine.enable_step_preemption(None)
        return
    if deltas:
        service.num_steps += 1
        service.publish(deltas)
