"""The busy loop in-process, on a real LLMEngine and a real Redis: aborts, drain, pickup."""

from __future__ import annotations

import asyncio
import time
import uuid

import msgspec
import pytest
import redis

from engine import protocol
from engine.protocol import FIELD, Keys
from engine.service import EngineService
from engine.service.redis_input import CLOCK_MARGIN_S, RECENT_ABORT_S, NewRequest
from inference.transport.engine_client import EngineClient
from tests.engine.service.support import in_process_service, wait_for

MODEL = "inproc"


@pytest.fixture
def service(tiny_llama, redis_server):
    svc = in_process_service(
        tiny_llama, redis_server.url, MODEL, status_interval=0.2, status_ttl=1.0
    )
    yield svc
    svc.redis.close()


def new_request(request_id: str, *, max_tokens: int = 200, prompt_len: int = 40) -> NewRequest:
    request = protocol.GenerateRequest(
        request_id=request_id,
        frontend_id="fe",
        prompt_token_ids=[(7 * i) % 500 + 10 for i in range(prompt_len)],
        sampling=protocol.SamplingOptions(temperature=0.0, max_tokens=max_tokens, ignore_eos=True),
    )
    return NewRequest(
        entry_id=f"{int(time.time() * 1000)}-{uuid.uuid4().int % 1000}", request=request
    )


def queued_jobs(svc: EngineService):
    jobs = []
    while not svc.writer._jobs.empty():
        jobs.append(svc.writer._jobs.get_nowait())
    return jobs


def test_abort_of_a_running_request_frees_its_blocks_in_the_next_iteration(service):
    engine = service.engine
    service.inbox.put(new_request("a"))
    service.inbox.put(new_request("b"))
    for _ in range(3):
        service.run_once()
    before = engine.stats()
    assert before.num_running == 2
    service.inbox.put(protocol.AbortRequest(request_id="a"))
    service.run_once()  # one iteration: drain_inputs (abort), step, publish
    after = engine.stats()
    assert after.num_running == 1
    assert after.num_free_blocks > before.num_free_blocks
    deltas = [d for job in queued_jobs(service) for ds in job.outputs.values() for d in ds]
    assert [d.finish_reason for d in deltas if d.request_id == "a"][-1] == "abort"
    # The other request went on producing tokens in that same iteration.
    assert any(d.request_id == "b" and d.new_token_ids for d in deltas[-2:])


def test_abort_overtaking_its_request_means_it_never_runs(service):
    service.inbox.put(protocol.AbortRequest(request_id="late"))
    service.inbox.put(new_request("late"))
    service.run_once()
    assert service.engine.stats().prompt_tokens_total == 0
    assert not service.engine.has_unfinished_requests()
    [job] = queued_jobs(service)
    assert job.outputs["fe"][0].finish_reason == "abort" and len(job.done) == 1


def test_abort_sent_before_any_engine_read_the_request(service, redis_server):
    r = redis.Redis.from_url(redis_server.url)
    keys = Keys(service.settings.prefix)
    request = new_request("queued-then-aborted").request
    r.xadd(keys.requests(MODEL), {FIELD: protocol.encode(request)})

    async def abort():
        client = EngineClient(redis_server.url, prefix=service.settings.prefix)
        await client.abort("queued-then-aborted")
        await client.close()

    asyncio.run(abort())
    service.start()
    try:
        answered_as_aborted_without_running(service, r, "queued-then-aborted")
    finally:
        service.stop()
        service.shutdown()
    assert r.xpending(keys.requests(MODEL), protocol.ENGINE_GROUP)["pending"] == 0
    r.close()


def answered_as_aborted_without_running(service, r: redis.Redis, request_id: str) -> None:
    """Run the loop until the frontend's stream has an answer: the request's abort, with no
    prompt token computed."""
    outputs = Keys(service.settings.prefix).outputs("fe")

    def answered():
        service.run_once()
        return r.xlen(outputs)

    wait_for(answered, 10, "the abort answer")
    [(_, fields)] = r.xrange(outputs)
    [delta] = protocol.decode_outputs(fields[FIELD]).deltas
    assert (delta.request_id, delta.finish_reason) == (request_id, "abort")
    assert service.engine.stats().prompt_tokens_total == 0  # it never ran


def test_drain_hands_back_unstarted_requests_and_finishes_running_ones(service, redis_server):
    r = redis.Redis.from_url(redis_server.url)
    keys = Keys(service.settings.prefix)
    service.start()
    try:
        for i in range(4):  # max_num_seqs=2: two run, two wait
            request = new_request(f"d{i}", max_tokens=30).request
            r.xadd(keys.requests(MODEL), {FIELD: protocol.encode(request)})

        def two_started():
            service.run_once()
            return sum(a.started for a in service.active.values()) == 2 and len(service.active) == 4

        wait_for(two_started, 10, "two running and two waiting")
        service.request_drain()
        while service.active:
            service.run_once()
    finally:
        service.stop()
        service.shutdown()
    # The two waiting requests were put back on the stream for other engines; the four
    # entries this engine took are gone: none is left in the stream for ever.
    entries = r.xrange(keys.requests(MODEL))
    ids = [protocol.decode_request(f[FIELD]).request_id for _, f in entries]
    assert len(_finished(r, keys)) == 2
    assert sorted(ids) == sorted({"d0", "d1", "d2", "d3"} - _finished(r, keys))
    assert r.xpending(keys.requests(MODEL), protocol.ENGINE_GROUP)["pending"] == 0
    assert not r.exists(keys.status(MODEL, service.settings.engine_id))
    r.close()


def _finished(r, keys) -> set[str]:
    done = set()
    for _, fields in r.xrange(keys.outputs("fe")):
        for d in protocol.decode_outputs(fields[FIELD]).deltas:
            if d.finish_reason == "length":
                done.add(d.request_id)
    return done


def fresh_request(request_id: str) -> protocol.GenerateRequest:
    """A request as the API sends it: accepted (``arrival_time``) just now."""
    request = new_request(request_id).request
    return msgspec.structs.replace(request, arrival_time=time.time())


def test_the_abort_stream_alone_is_trusted_only_for_requests_it_covers(service):
    broadcast = service.broadcast
    started = broadcast.since + CLOCK_MARGIN_S  # when this engine started, by its clock
    assert started <= time.time()

    def accepted_at(moment: float) -> protocol.GenerateRequest:
        return msgspec.structs.replace(new_request("r").request, arrival_time=moment)

    assert broadcast.hears_aborts_of(fresh_request("now"))
    # Accepted before this engine listened (its abort may be older than the stream read),
    # with no arrival time (not from the API), or so long ago that the loop may have
    # forgotten its abort: the marker is read.
    assert not broadcast.hears_aborts_of(accepted_at(started - 1))
    assert not broadcast.hears_aborts_of(new_request("no-arrival-time").request)
    broadcast.since = time.time() - 600  # an engine that has listened for ten minutes
    assert broadcast.hears_aborts_of(accepted_at(time.time() - 30))
    assert not broadcast.hears_aborts_of(accepted_at(time.time() - RECENT_ABORT_S))


def test_a_fresh_request_aborted_before_pickup_never_runs_without_its_marker(service, redis_server):
    # The reader reads no marker for a request the abort stream covers: the abort that
    # arrived on the stream before the request must be enough.
    r = redis.Redis.from_url(redis_server.url)
    keys = Keys(service.settings.prefix)
    service.start()
    try:

        async def abort():
            client = EngineClient(redis_server.url, prefix=service.settings.prefix)
            await client.abort("fresh-aborted")
            await client.close()

        asyncio.run(abort())
        r.delete(keys.aborted("fresh-aborted"))

        def heard():
            service.run_once()
            return "fresh-aborted" in service.recent_aborts

        wait_for(heard, 10, "the abort from the abort stream")
        request = fresh_request("fresh-aborted")
        assert service.broadcast.hears_aborts_of(request)
        r.xadd(keys.requests(MODEL), {FIELD: protocol.encode(request)})

        answered_as_aborted_without_running(service, r, "fresh-aborted")
    finally:
        service.stop()
        service.shutdown()
    r.close()


def test_requests_taken_into_the_engine_count_against_the_bound_until_the_stats_do(service):
    """Backpressure: between taking requests from the inbox and the stats of the step after,
    the reader counted them nowhere and read up to its bound again, holding twice what this
    engine could schedule soon (unstarted requests other replicas could have taken)."""
    assert service.read_ahead.bound == 16  # fcfs, max_num_seqs 2: the floor of 16
    for i in range(16):
        service.inbox.put(new_request(f"r{i}"))
    assert service.room() == 0
    assert len(service.drain_inputs()) == 16  # in the engine, not yet in its stats
    assert service.room() == 0
    service.publish(service.step())  # two run, fourteen wait: the stats count them now
    assert service.stats.num_waiting == 14
    assert service.room() == 2
