"""A tenant's burst waits in the API process past its fill of the engines' queues
(inference/transport/tenant_backlog.py): another tenant's request is never behind all of it in
the model's stream, nothing of the burst is lost, and what waits counts towards overload."""

from __future__ import annotations

import asyncio
import time

import pytest

from engine import protocol
from engine.text.tokenizer import ChatTokenizer
from inference.transport import engine_capacity
from inference.transport.engine_capacity import ADMISSION_STALE_S
from inference.transport.engine_client import (
    EngineClient,
    EngineOverloaded,
    EngineRequest,
    SamplingOptions,
)
from inference.transport.tenant_backlog import MIN_SHARE, TenantBacklog
from tests.inference.test_engine_client import (
    MODEL,
    ScriptedEngine,
    announce,
    collect,
    one_token_per_step,
)

KEY_A = (MODEL, "tA", "interactive")


def no_lane() -> None:
    """What the engine client's ``on_wait`` does outside a request: nothing to let go."""


def message(tenant="tA", service_class="interactive", priority=0) -> protocol.GenerateRequest:
    return EngineRequest.build(
        model=MODEL,
        prompt_token_ids=[5],
        tenant=tenant,
        service_class=service_class,
        priority=priority,
    ).message


def enter(backlog: TenantBacklog, num_engines=1, model=MODEL, num_frontends=1, **fields):
    """``backlog.enter`` for a request of tenant A unless ``fields`` say otherwise."""
    return backlog.enter(model, message(**fields), num_engines, num_frontends, on_wait=no_lane)


async def test_past_its_fill_a_tenant_waits_in_order_and_goes_as_earlier_ones_leave(caplog):
    caplog.set_level("INFO", logger="inference.transport.tenant_backlog")
    backlog = TenantBacklog(per_engine=2)
    first = [await enter(backlog) for _ in range(2)]
    waiting = [asyncio.create_task(enter(backlog)) for _ in range(3)]
    await asyncio.sleep(0)
    assert not any(t.done() for t in waiting) and backlog.held(MODEL) == 3
    # The operator's log says so once for the burst, not once for each request held.
    [record] = [r.getMessage() for r in caplog.records]
    assert "tenant tA (interactive) has 2 requests waiting for the engines of" in record
    first[1].leave()
    first[1].leave()  # idempotent: one place handed on, not two
    await asyncio.sleep(0)
    assert [t.done() for t in waiting] == [True, False, False]  # in order of waiting
    assert backlog.held(MODEL) == 2
    first[0].leave()
    waiting[0].result().leave()
    await asyncio.sleep(0)
    assert all(t.done() for t in waiting) and backlog.held(MODEL) == 0
    for task in waiting[1:]:
        task.result().leave()
    assert backlog.sent(KEY_A) == 0


async def test_other_tenants_and_classes_never_wait_behind_a_tenants_fill():
    backlog = TenantBacklog(per_engine=1)
    await enter(backlog)
    held = asyncio.create_task(enter(backlog))
    await asyncio.sleep(0)
    assert not held.done()
    for others in ({"tenant": "tB"}, {"service_class": "batch"}, {"model": "other"}):
        await asyncio.wait_for(enter(backlog, **others), 1)
    held.cancel()


async def test_a_tenants_waiting_requests_go_in_order_of_priority_then_of_arrival():
    """As the engine's scheduler orders one tenant's requests: a later urgent request of a
    tenant is not held behind that tenant's earlier ordinary ones."""
    backlog = TenantBacklog(per_engine=1)
    place = await enter(backlog)
    order: list[str] = []

    async def request(name: str, priority: int) -> None:
        (await enter(backlog, priority=priority)).leave()
        order.append(name)

    tasks = []
    for name, priority in (("plain-1", 0), ("plain-2", 0), ("urgent", -5), ("low", 9)):
        tasks.append(asyncio.create_task(request(name, priority)))
        await asyncio.sleep(0)
    place.leave()
    await asyncio.wait_for(asyncio.gather(*tasks), 1)
    assert order == ["urgent", "plain-1", "plain-2", "low"]


async def test_the_fill_grows_with_the_engines_of_the_model():
    backlog = TenantBacklog(per_engine=2)
    places = [await enter(backlog, 3) for _ in range(6)]
    lane_let_go = []
    seventh = asyncio.create_task(
        backlog.enter(MODEL, message(), 3, on_wait=lambda: lane_let_go.append(1))
    )
    await asyncio.sleep(0)
    assert not seventh.done() and lane_let_go == [1]  # it waits, and let its lane go first
    places[0].leave()
    await asyncio.wait_for(seventh, 1)


async def test_nothing_is_held_in_front_of_engines_that_serve_first_come_first_served():
    """The operator chose FIFO: each request goes to the stream as it comes."""
    backlog = TenantBacklog(per_engine=1)
    for _ in range(10):
        await asyncio.wait_for(enter(backlog, 0), 1)  # no engine of the fair policy
    assert backlog.held(MODEL) == 0
    fifo = protocol.EngineStatus(engine_id="e", model=MODEL, scheduling_policy="fcfs")
    fair = protocol.EngineStatus(engine_id="e", model=MODEL, scheduling_policy="fair")
    assert not fifo.schedules_fairly and fair.schedules_fairly


def test_the_bound_is_shared_by_the_frontends_sending_to_the_model():
    backlog = TenantBacklog(per_engine=64)
    assert [backlog.share(n) for n in (1, 2, 3, 4, 8)] == [64, 32, 22, 16, 8]
    # However many send, each keeps the engines' queues fed while its requests start.
    assert backlog.share(100) == MIN_SHARE
    # An operator's bound below the floor is kept as it is, not raised to it.
    assert TenantBacklog(per_engine=4).share(3) == 4


async def test_a_smaller_share_holds_hand_ons_until_fewer_are_sent_and_a_larger_lets_more_in():
    backlog = TenantBacklog(per_engine=16)
    alone = [await enter(backlog) for _ in range(16)]
    # A second frontend started sending: this one's share is 8, so the next request waits...
    late = asyncio.create_task(enter(backlog, num_frontends=2))
    await asyncio.sleep(0)
    for place in alone[:8]:
        place.leave()
    await asyncio.sleep(0)
    assert not late.done()  # ...while 8 or more are still sent: no place handed on
    alone[8].leave()
    await asyncio.wait_for(late, 1)  # 7 sent: the place goes to it
    held = [asyncio.create_task(enter(backlog, num_frontends=2)) for _ in range(4)]
    await asyncio.sleep(0)
    assert backlog.held(MODEL) == 4
    # The other frontend stopped: the share is 16 again, and the next arrival lets those
    # in line in first, as many as the larger share has room for.
    newcomer = asyncio.create_task(enter(backlog, num_frontends=1))
    await asyncio.wait_for(asyncio.gather(*held), 1)
    await asyncio.wait_for(newcomer, 1)
    assert backlog.sent(KEY_A) == 7 + 1 + 4 + 1


async def test_a_cancelled_waiter_takes_no_place_and_passes_on_one_handed_to_it():
    backlog = TenantBacklog(per_engine=1)
    place = await enter(backlog)
    gone = asyncio.create_task(enter(backlog))
    handed = asyncio.create_task(enter(backlog))
    last = asyncio.create_task(enter(backlog))
    await asyncio.sleep(0)
    gone.cancel()  # waiting: it leaves the line
    await asyncio.sleep(0)
    place.leave()  # the place goes to ``handed``, which is cancelled before it resumes
    handed.cancel()
    await asyncio.wait_for(last, 1)  # so it went on to the next in line
    assert gone.cancelled() and handed.cancelled() and backlog.held(MODEL) == 0
    last.result().leave()
    assert backlog.sent(KEY_A) == 0


@pytest.fixture(scope="module")
def tokenizer(tiny_llama):
    return ChatTokenizer(tiny_llama)


@pytest.fixture
async def gated_client(redis_client, redis_server):
    client = EngineClient(
        redis_server.url,
        prefix=f"t{time.monotonic_ns()}",
        silence_timeout=5.0,
        max_waiting=1000,
        tenant_queued_per_engine=4,
    )
    yield client
    await client.close()


def build(tenant: str) -> EngineRequest:
    return EngineRequest.build(
        model=MODEL, prompt_token_ids=[5, 6], sampling=SamplingOptions(), tenant=tenant
    )


async def test_another_tenants_request_is_not_behind_a_whole_burst_in_the_stream(
    gated_client, tokenizer
):
    await announce(gated_client)
    ids = tokenizer.encode("ok")
    async with ScriptedEngine(gated_client, lambda r: one_token_per_step(r, ids)) as engine:
        burst = [asyncio.create_task(collect(gated_client.generate(build("tA"), tokenizer)))]
        burst += [
            asyncio.create_task(collect(gated_client.generate(build("tA"), tokenizer)))
            for _ in range(29)
        ]
        deadline = time.monotonic() + 5
        # The burst is in: 4 sent, the rest here (without the bound: all sent, none held).
        while gated_client.backlog.held(MODEL) < 20 and time.monotonic() < deadline:
            await asyncio.sleep(0.001)
        b = await collect(gated_client.generate(build("tB"), tokenizer))
        results = await asyncio.gather(*burst)
    assert "".join(c.text for c in b) == "ok"
    order = [r.tenant for r in engine.requests]
    # The engine reads in stream order: B's request came after at most A's four in flight and
    # those sent as they started meanwhile, not after all thirty (no bound: 31st).
    assert order.index("tB") < 12, order
    assert len(order) == 31 and all("".join(c.text for c in r) == "ok" for r in results)
    assert gated_client.backlog.held(MODEL) == 0


async def test_requests_waiting_here_count_towards_overload(gated_client, tokenizer):
    gated_client.max_waiting = 10
    await announce(gated_client)  # an engine that never reads: all stays waiting
    stream = gated_client.keys.requests(MODEL)
    await gated_client.redis.xgroup_create(stream, protocol.ENGINE_GROUP, id="0", mkstream=True)
    burst = [
        asyncio.create_task(collect(gated_client.generate(build("tA"), tokenizer)))
        for _ in range(10)
    ]
    while gated_client.backlog.held(MODEL) < 6:
        await asyncio.sleep(0.001)
    # Past the age at which an admission snapshot still admits: read afresh, the stream's 4.
    await asyncio.sleep(ADMISSION_STALE_S + 0.1)
    with pytest.raises(EngineOverloaded, match="10 requests are waiting"):
        await asyncio.wait_for(collect(gated_client.generate(build("tB"), tokenizer)), 5)
    for task in burst:
        task.cancel()
    await asyncio.gather(*burst, return_exceptions=True)
    assert gated_client.backlog.held(MODEL) == 0


async def test_api_processes_sending_to_a_model_share_a_tenants_room_in_its_stream(
    redis_server, tokenizer, monkeypatch
):
    """Two engine clients (two API processes) count each other through Redis; a burst through
    both leaves the tenant's bound in the stream, not twice it; when one stops sending, the
    other's share grows back."""
    monkeypatch.setattr(engine_capacity, "FRONTEND_WINDOW_S", 2.0)
    prefix = f"t{time.monotonic_ns()}"
    clients = [
        EngineClient(redis_server.url, prefix=prefix, max_waiting=1000, tenant_queued_per_engine=16)
        for _ in range(2)
    ]
    stream = clients[0].keys.requests(MODEL)
    bursts: list[asyncio.Task] = []
    try:
        await announce(clients[0])  # an engine that never reads: everything sent stays there
        await clients[0].redis.xgroup_create(stream, protocol.ENGINE_GROUP, id="0", mkstream=True)
        for client in clients:
            await client.capacity.routable(MODEL)
        await asyncio.sleep(ADMISSION_STALE_S + 0.05)
        await clients[0].capacity.routable(MODEL)  # read afresh: it sees the second one
        assert [c.capacity.frontends(MODEL) for c in clients] == [2, 2]

        for client in clients:
            bursts += [
                asyncio.create_task(collect(client.generate(build("tA"), tokenizer)))
                for _ in range(20)
            ]
        deadline = time.monotonic() + 5
        while await clients[0].redis.xlen(stream) < 16 or any(
            c.backlog.held(MODEL) < 12 for c in clients
        ):
            assert time.monotonic() < deadline, [c.backlog.held(MODEL) for c in clients]
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.1)
        assert await clients[0].redis.xlen(stream) == 16  # 8 each, not 16 each
        assert [c.backlog.held(MODEL) for c in clients] == [12, 12]

        for task in bursts[20:]:  # the second process's clients leave; it sends nothing more
            task.cancel()
        await asyncio.sleep(2.2)  # past the window, and the snapshot's life
        await clients[0].capacity.routable(MODEL)
        assert clients[0].capacity.frontends(MODEL) == 1
        # Its next request lets its held ones in first, up to the whole bound.
        bursts.append(asyncio.create_task(collect(clients[0].generate(build("tA"), tokenizer))))
        deadline = time.monotonic() + 5
        while clients[0].backlog.sent((MODEL, "tA", "interactive")) < 16:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.001)
        assert clients[0].backlog.held(MODEL) == 5
    finally:
        for task in bursts:
            task.cancel()
        await asyncio.gather(*bursts, return_exceptions=True)
        for client in clients:
            await client.close()


async def test_the_wait_here_counts_in_the_requests_queue_time(redis_server, tokenizer):
    """The engine counts queue time from when it read a request; a request held here for its
    tenant's turn waited too, and its reported queue time (the dashboard's per-tenant queue
    wait, vllm:request_queue_time_seconds) says so."""
    client = EngineClient(
        redis_server.url, prefix=f"t{time.monotonic_ns()}", tenant_queued_per_engine=1
    )
    [token] = tokenizer.encode("a")[:1]

    def answer_after_a_pause(request):
        final = protocol.RequestDelta(
            request_id=request.request_id,
            new_token_ids=[token],
            finish_reason="length",
            num_prompt_tokens=2,
            queue_time=0.05,  # what the engine measured
        )
        return [0.3, [final]]

    try:
        await announce(client)
        async with ScriptedEngine(client, answer_after_a_pause):
            first, second = await asyncio.gather(
                collect(client.generate(build("tA"), tokenizer)),
                collect(client.generate(build("tA"), tokenizer)),
            )
    finally:
        await client.close()
    queue_times = sorted(chunks[-1].queue_time for chunks in (first, second))
    assert queue_times[0] < 0.1  # sent at once: the engine's own measure
    assert queue_times[1] >= 0.05 + 0.25  # held here while the first one ran
