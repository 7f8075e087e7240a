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


def test_deferred_requests_come_back_first_and_count_as_queued():
    inbox = Inbox()
    for rid in ("a", "b", "c"):
        inbox.put(_new(rid))
    taken = inbox.take_new_requests()
    inbox.defer(taken[1:])  # "a" was added; "b" and "c" wait for the next pause
    assert inbox.num_requests == 2
    inbox.put(_new("d"))
    abort = protocol.AbortRequest(request_id="b")
    inbox.put(abort)
    assert [e.request.request_id for e in inbox.take_new_requests()] == ["b", "c", "d"]
    assert inbox.num_requests == 0
    inbox.defer([_new("c")])
    # take_all: the events left behind, then the deferred requests, without waiting.
    events = inbox.take_all(timeout=5.0)
    assert len(events) == 2 and events[0] is abort and events[1].request.request_id == "c"
    assert inbox.num_requests == 0


def test_requests_taken_stay_counted_until_the_loop_settles():
    inbox = Inbox()
    for rid in ("a", "b", "c"):
        inbox.put(_new(rid))
    taken = inbox.take_all()
    assert (inbox.num_requests, inbox.num_uncounted) == (0, 3)
    inbox.defer(taken[2:])  # back in the queue: counted once, not twice
    assert (inbox.num_requests, inbox.num_uncounted) == (1, 3)
    inbox.settle()  # the engine's stats now count "a" and "b"
    assert (inbox.num_requests, inbox.num_uncounted) == (1, 1)
    inbox.take_new_requests()
    assert inbox.num_uncounted == 1
