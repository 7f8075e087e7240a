"""Under the fair policy the service loop adds a batch of new requests tenants with the fewest
first, so one tenant's request does not wait in the inbox while a flood's hundred ahead of it
are added (engine/service/intake_order.py)."""

from __future__ import annotations

from engine import protocol
from engine.service.intake_order import fewest_first, first_slice, singles_and_rest
from engine.service.redis_input import NewRequest


def _new(rid: str, tenant: str) -> NewRequest:
    message = protocol.GenerateRequest(
        request_id=rid,
        frontend_id="f",
        prompt_token_ids=[5, 6, 7],
        sampling=protocol.SamplingOptions(max_tokens=2),
        tenant=tenant,
    )
    return NewRequest(f"{rid}-entry", message)


def _ids(events) -> list[str]:
    return [e.request.request_id if isinstance(e, NewRequest) else e.request_id for e in events]


def test_a_lone_request_behind_a_flood_is_added_first_and_each_tenant_keeps_its_order():
    abort = protocol.AbortRequest(request_id="a-0")
    events = [_new("a-0", "A"), _new("a-1", "A"), abort, _new("a-2", "A"), _new("b-0", "B")]
    events += [_new("c-0", "C"), _new("c-1", "C")]
    ordered = fewest_first(events)
    # New requests only move among their own places; the abort stays where it was.
    assert ordered[2] is abort
    assert _ids([e for e in ordered if isinstance(e, NewRequest)]) == [
        "b-0",
        "c-0",
        "c-1",
        "a-0",
        "a-1",
        "a-2",
    ]


def test_one_tenant_alone_keeps_the_stream_order():
    events = [_new("a-0", "A"), _new("a-1", "A")]
    assert fewest_first(events) is events


def test_singles_are_split_from_tenants_with_several():
    events = [_new("a-0", "A"), _new("b-0", "B"), _new("a-1", "A"), _new("c-0", "C")]
    singles, rest = singles_and_rest(events)
    assert _ids(singles) == ["b-0", "c-0"] and _ids(rest) == ["a-0", "a-1"]


def test_a_slice_ends_with_the_request_that_brings_its_tokens_past_the_budget():
    abort = protocol.AbortRequest(request_id="x")
    events = [_new(f"a-{i}", "A") for i in range(5)]  # 3 prompt tokens each
    events.insert(2, abort)
    now, later = first_slice(events, tokens=7)
    # 3 + 3 = 6 < 7, so a third; every other event stays in its place.
    assert _ids(now) == ["a-0", "a-1", "x", "a-2"] and now[2] is abort
    assert _ids(later) == ["a-3", "a-4"]
    # At least one request, however long; nothing is cut without a budget to pass.
    assert _ids(first_slice(events, tokens=1)[0]) == ["a-0", "x"]
    assert first_slice(events, tokens=100) == (events, [])
