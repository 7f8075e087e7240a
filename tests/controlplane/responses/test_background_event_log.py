"""A streamed background response that fails: its followers get ``response.failed`` and the
stream ends, and the row says why; a follower of a runner that died stops when the row is
failed rather than waiting for ever. Real Redis and database; the generation is a stand-in
that fails as the engine client does when no engine serves the model."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from asgiref.sync import sync_to_async

from controlplane.responses.background import background_start
from controlplane.responses.models import StoredResponse
from inference.responses import background
from inference.responses.context import ResponseContext
from inference.responses.event_log import EventLogWriter, follow
from inference.transport import EngineUnavailable

pytestmark = pytest.mark.django_db(transaction=True)


class _Formatter:
    def __init__(self):
        self.sequence = 0

    def event(self, kind, **fields):
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event


class _NoEngine:
    """What background.py uses of a Generation: open() fails before any output."""

    def __init__(self, context: ResponseContext):
        self.plan = SimpleNamespace(response=context, model="tiny", stream=True)
        self.formatter = _Formatter()
        self.settled: list[int] = []

    async def open(self):
        raise EngineUnavailable("no engine serves tiny")

    async def settle(self, status: int):
        self.settled.append(status)


async def _events(response_id: str, still_running) -> list[dict]:
    return [e async for e in follow(response_id, after=-1, still_running=still_running)]


async def test_a_failed_streamed_background_response_ends_its_followers(make_tenant, redis_client):
    tenant = await sync_to_async(make_tenant)("Streams")
    generation = _NoEngine(ResponseContext(tenant_id=tenant.pk, key_prefix="sk-x", input_items=[]))
    queued = await background.start_background(generation)

    events = await asyncio.wait_for(_events(queued["id"], _never_asked), timeout=10)
    [failed] = events
    assert failed["type"] == "response.failed" and failed["sequence_number"] == 0
    assert failed["response"]["error"]["code"] == "engine_unavailable"
    row = await StoredResponse.objects.aget(pk=queued["id"])
    assert row.status == "failed"
    await asyncio.wait_for(asyncio.gather(*background._running), timeout=10)  # its end ran
    assert generation.settled == [499]  # settles once; open() had settled a real one already


async def test_a_follower_stops_when_the_runner_is_gone(make_tenant, redis_client):
    tenant = await sync_to_async(make_tenant)("Orphans")
    response = {"id": "resp_orphan", "model": "tiny", "status": "in_progress", "background": True}
    await sync_to_async(background_start)(
        tenant_id=tenant.pk, key_prefix="sk-x", response=response, input_items=[]
    )
    log = EventLogWriter("resp_orphan")
    await log.append({"type": "response.created", "sequence_number": 0})
    await log.append({"type": "response.in_progress", "sequence_number": 1})
    # The runner's process died here: no more events, no end marker.
    asked = []

    async def still_running() -> bool:
        asked.append(True)
        return len(asked) < 2  # the row is failed at the second look (stale heartbeat)

    events = await asyncio.wait_for(_events("resp_orphan", still_running), timeout=15)
    assert [e["sequence_number"] for e in events] == [0, 1] and len(asked) == 2
    resumed = [e async for e in follow("resp_orphan", after=0, still_running=_not_running)]
    assert [e["type"] for e in resumed] == ["response.in_progress"]


async def _never_asked() -> bool:
    raise AssertionError("the log's final event ends the stream first")


async def _not_running() -> bool:
    return False
