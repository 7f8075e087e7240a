"""The loop's Inbox (engine/service/redis_input.py): a step paused between layers takes only
the new requests (engine/core/step_preemption.py); everything else keeps its order for the end
of the step."""

from __future__ import annotations

from engine import protocol
from engine.service.redis_input import Inbox, NewRequest, RegistrySnapshot


def _new(rid: str) -> NewRequest:
    request = protocol.GenerateRequest(
        request_id=rid,
        frontend_id="f",
        prompt_token_ids=[5, 6, 7],
        sampling=protocol.SamplingOptions(max_tokens=2),
    )
    return NewRequest(f"1-{rid}", request)


def test_new_requests_are_taken_alone_and_the_rest_keeps_its_order():
    inbox = Inbox()
    abort = protocol.AbortRequest(request_id="x")
    snapshot = RegistrySnapshot({}, 0.0)
    for event in (abort, _new("a"), snapshot, _new("b")):
        inbox.put(event)
    assert inbox.num_requests == 2
    assert [e.request.request_id for e in inbox.take_new_requests()] == ["a", "b"]
    assert inbox.num_requests == 0
    later = _new("c")
    inbox.put(later)
    # The events left behind come first, then what arrived since, without waiting.
    assert inbox.take_all(timeout=5.0) == [abort, snapshot, later]
    assert inbox.num_requests == 0 and inbox.take_all() == []
