"""Waiting requests handed over to an engine of the model that could start them
(engine/service/hand_over.py): when it says so, which requests move, and two real engine
processes sharing a burst one of them had read alone."""

from __future__ import annotations

import time
import uuid

import pytest
import redis

from engine import protocol
from engine.direct_routing import direct_entry
from engine.outputs import EngineStats
from engine.protocol import FIELD, Keys
from engine.service import EngineService
from engine.service import hand_over as hand_over_module
from engine.service.hand_over import IDLE_EVERY_S, Starvation
from engine.service.redis_input import NewRequest
from tests.engine.service.support import EngineProcess, in_process_service, wait_for

MODEL = "handover"


def _stats(running: int = 0, waiting: int = 0, tokens: int = 0) -> EngineStats:
    return EngineStats(
        num_running=running,
        num_waiting=waiting,
        kv_cache_usage=0.0,
        num_free_blocks=100,
        num_total_blocks=100,
        prefix_cache_queries=0,
        prefix_cache_hits=0,
        num_preemptions=0,
        prompt_tokens_total=tokens,
        generation_tokens_total=0,
        max_num_seqs=4,
        running_lora_adapters=[],
        waiting_lora_adapters=[],
        max_lora=0,
    )


class Clock:
    def __init__(self, monkeypatch):
        self.now = 1000.0
        monkeypatch.setattr(hand_over_module.time, "monotonic", lambda: self.now)


def test_an_engine_says_it_is_idle_as_it_starts_and_after_work_not_while_it_rests(monkeypatch):
    clock, starvation = Clock(monkeypatch), Starvation("me")
    idle = starvation.check(_stats(), unread=0, room=100)
    assert idle == protocol.Idle(engine_id="me", room=100, load=0)
    clock.now += 0.01
    assert starvation.check(_stats(running=3, tokens=50), 0, 100) is None  # too soon
    clock.now += IDLE_EVERY_S
    assert starvation.check(_stats(running=3, tokens=60), 0, 90).load == 3
    clock.now += 10
    assert starvation.check(_stats(tokens=60), 0, 100) is None  # nothing done since: nothing new
    clock.now += 10
    assert starvation.check(_stats(tokens=61), 0, 100) is not None
    assert starvation.num_announced == 3  # what its status record reports


@pytest.mark.parametrize(
    ("stats", "unread", "room"),
    [
        (_stats(running=1, waiting=1, tokens=5), 0, 100),  # a request waits
        (_stats(running=1, tokens=5), 2, 100),  # read, not yet in the stats
        (_stats(running=4, tokens=5), 0, 100),  # no batch slot free
        (_stats(running=1, tokens=5), 0, 0),  # its reader may take no more
    ],
)
def test_a_busy_or_full_engine_says_nothing(monkeypatch, stats, unread, room):
    Clock(monkeypatch)
    assert Starvation("me").check(stats, unread, room) is None


@pytest.fixture
def service(tiny_llama, redis_server):
    svc = in_process_service(tiny_llama, redis_server.url, MODEL, engine_id="busy")
    yield svc
    svc.redis.close()


def _new(request_id: str, tenant: str, *, direct: bool = False) -> NewRequest:
    request = protocol.GenerateRequest(
        request_id=request_id,
        frontend_id="fe",
        prompt_token_ids=[5 + i % 90 for i in range(24)],
        sampling=protocol.SamplingOptions(temperature=0.0, max_tokens=50, ignore_eos=True),
        tenant=tenant,
    )
    entry = f"{int(time.time() * 1000)}-{uuid.uuid4().int % 10**6}"
    return NewRequest(direct_entry(entry) if direct else entry, request)


def _moves(service: EngineService) -> list[tuple[str, str]]:
    moves = []
    while not service.writer._jobs.empty():
        moves += [(peer, r.request_id) for peer, r in service.writer._jobs.get_nowait().moves]
    return moves


def test_the_latest_of_the_most_backlogged_tenant_go_and_routed_ones_stay(service):
    for i in range(12):
        service.inbox.put(_new(f"a{i}", "tA"))
    service.inbox.put(_new("b0", "tB"))
    service.inbox.put(_new("routed", "tA", direct=True))  # sent here for its cached prefix
    service.run_once()
    assert (service.stats.num_running, service.stats.num_waiting) == (2, 12)
    _moves(service)

    service.inbox.put(protocol.Idle(engine_id="busy", room=100, load=0))  # its own: ignored
    service.inbox.put(protocol.Idle(engine_id="peer", room=100, load=0))
    service.run_once()
    # Half the load difference (14 against 0), within what waits: tA's latest seven; tB's one
    # request and the routed one stay.
    assert _moves(service) == [("peer", f"a{i}") for i in range(11, 4, -1)]
    assert service.starvation.num_handed_over == 7  # in its status record and /metrics
    assert service.engine.stats().num_waiting == 5
    assert {f"a{i}" for i in range(5, 12)}.isdisjoint(service.active)

    service.inbox.put(protocol.Idle(engine_id="peer", room=2, load=0))
    service.run_once()
    assert len(_moves(service)) == 2  # within the room it has


def test_an_announcement_made_between_two_reads_reaches_every_engine(service):
    """The broadcast reader reads on from the last entry it saw, not from "$" (which each read
    resolves again, losing what came between two: under load, an idle engine's only
    announcement, and with it the whole hand-over; CI, 2026-11-29)."""
    reader = service.broadcast
    service.inbox.take_all()  # what the engine queued as it started
    reader.read()  # nothing new: returns after its block
    idle = protocol.Idle(engine_id="peer", room=8, load=0)
    service.redis.xadd(service.keys.idle(MODEL), {FIELD: protocol.encode(idle)})
    reader.read()
    assert service.inbox.take_all() == [idle]


@pytest.mark.slow
def test_an_engine_started_later_takes_half_of_the_burst_the_first_one_read(
    tiny_llama, redis_server, tmp_path
):
    """The first engine reads a whole burst (its fair look-ahead holds 272); the second, started
    after, says it is idle, and the first hands it half of what waits: both serve the burst,
    each request once, from its own engine."""
    prefix, frontend = f"ho{uuid.uuid4().hex[:6]}", f"fe-{uuid.uuid4().hex[:6]}"
    keys, client = Keys(prefix), redis.Redis.from_url(redis_server.url)
    options = ["--max-num-seqs", "2", "--status-interval", "0.2", "--status-ttl", "2"]

    def engine(name: str) -> EngineProcess:
        return EngineProcess(
            model_path=tiny_llama,
            model_name=MODEL,
            redis_url=redis_server.url,
            prefix=prefix,
            log_dir=tmp_path,
            engine_id=name,
            extra=options,
        ).wait_live()

    first = engine("first")
    engines = [first]
    try:
        burst = [f"r{i}" for i in range(120)]
        pipe = client.pipeline()
        for i, rid in enumerate(burst):  # two at a time, 100 tokens each: many seconds' work
            message = protocol.GenerateRequest(
                request_id=rid,
                frontend_id=frontend,
                prompt_token_ids=[(i * 7 + j) % 900 + 5 for j in range(16)],
                sampling=protocol.SamplingOptions(max_tokens=100, ignore_eos=True),
                tenant="tA",
            )
            pipe.xadd(keys.requests(MODEL), {FIELD: protocol.encode(message)})
        pipe.execute()
        wait_for(
            lambda: client.xpending(keys.requests(MODEL), protocol.ENGINE_GROUP)["pending"] == 120,
            30,
            "the first engine to read the whole burst",
        )
        second = engine("second")
        engines.append(second)

        def served_by() -> dict[str, set[str]]:
            by: dict[str, set[str]] = {"first": set(), "second": set()}
            for _, fields in client.xrange(keys.outputs(frontend)):
                batch = protocol.decode_outputs(fields[FIELD])
                by[batch.engine_id].update(d.request_id for d in batch.deltas)
            return by

        wait_for(lambda: len(served_by()["second"]) >= 10, 60, "the second engine to serve")
        by = served_by()
        assert not by["first"] & by["second"], "a request ran on both engines"
        assert "handed over to idle engine second" in first.log_tail(20000)
        # What an operator sees of it: the counters in the engines' status records.
        wait_for(
            lambda: first.status().num_handed_over >= len(by["second"]),
            10,
            "the first engine's record to count what it handed over",
        )
        assert second.status().num_idle_announcements >= 1
        assert second.status().num_handed_over == 0
    finally:
        for proc in engines:
            proc.stop()
        client.close()
