"""EngineClient against a scripted engine on a real Redis: streaming, stops, errors, aborts."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
import redis.asyncio as aioredis

from engine import protocol
from engine.protocol import FIELD, Keys
from engine.text.tokenizer import ChatTokenizer
from inference.transport import engine_client
from inference.transport.engine_capacity import ADMISSION_CACHE_S
from inference.transport.engine_client import (
    EngineClient,
    EngineError,
    EngineOverloaded,
    EngineRequest,
    EngineTimeout,
    EngineUnavailable,
    SamplingOptions,
)
from inference.transport.engine_request import OutputOptions
from inference.transport.output_fanout import READ_BLOCK_MS

MODEL = "scripted"


@pytest.fixture(scope="module")
def tokenizer(tiny_llama):
    return ChatTokenizer(tiny_llama)


@pytest.fixture
async def client(redis_client, redis_server):
    prefix = f"t{time.monotonic_ns()}"
    client = EngineClient(redis_server.url, prefix=prefix, silence_timeout=2.0, max_waiting=8)
    yield client
    await client.close()


async def announce(client: EngineClient, *, num_waiting: int = 0, engine_id: str = "e1") -> None:
    status = protocol.EngineStatus(
        engine_id=engine_id, model=MODEL, num_waiting=num_waiting, max_num_seqs=4
    )
    await client.redis.set(client.keys.status(MODEL, engine_id), protocol.encode_status(status))
    await client.redis.sadd(client.keys.engines(), protocol.engine_member(MODEL, engine_id))


class ScriptedEngine:
    """Answers each request with ``script(request)``: a list of steps, each a list of deltas."""

    def __init__(self, client: EngineClient, script):
        self.redis = aioredis.Redis.from_url(_url(client))
        self.keys: Keys = client.keys
        self.script = script
        self.requests: list[protocol.GenerateRequest] = []
        self.task: asyncio.Task | None = None
        self.stopping = False

    async def __aenter__(self):
        stream = self.keys.requests(MODEL)
        try:
            await self.redis.xgroup_create(stream, protocol.ENGINE_GROUP, id="0", mkstream=True)
        except aioredis.ResponseError:
            pass
        self.task = asyncio.create_task(self._serve(stream))
        return self

    async def __aexit__(self, *exc):
        # Cancelling a blocked XREADGROUP can hang in redis-py: ask the loop to end instead.
        self.stopping = True
        await asyncio.wait({self.task}, timeout=2)
        self.task.cancel()
        await asyncio.wait({self.task}, timeout=2)
        await self.redis.aclose()

    async def _serve(self, stream):
        while not self.stopping:
            resp = await self.redis.xreadgroup(
                protocol.ENGINE_GROUP, "e1", {stream: ">"}, count=10, block=200
            )
            for _s, entries in resp or []:
                for _id, fields in entries:
                    request = protocol.decode_request(fields[FIELD])
                    self.requests.append(request)
                    for step in self.script(request):
                        if step == "silence":
                            await asyncio.sleep(3600)
                        if isinstance(step, float):  # a pause of that many seconds
                            await asyncio.sleep(step)
                            continue
                        batch = protocol.OutputBatch(engine_id="e1", deltas=step)
                        await self.redis.xadd(
                            self.keys.outputs(request.frontend_id),
                            {FIELD: protocol.encode(batch)},
                        )
                        await asyncio.sleep(0.01)


def _url(client: EngineClient) -> str:
    kw = client.redis.connection_pool.connection_kwargs
    return f"redis://{kw['host']}:{kw['port']}/{kw.get('db', 0)}"


def one_token_per_step(request, token_ids, finish_reason="length"):
    steps = []
    for i, token_id in enumerate(token_ids):
        last = i == len(token_ids) - 1
        steps.append(
            [
                protocol.RequestDelta(
                    request_id=request.request_id,
                    new_token_ids=[token_id],
                    finish_reason=finish_reason if last else None,
                    num_prompt_tokens=len(request.prompt_token_ids),
                    num_cached_tokens=2,
                )
            ]
        )
    return steps


async def collect(gen):
    return [chunk async for chunk in gen]


async def test_no_live_engine_is_unavailable(client, tokenizer):
    gen = client.generate(
        EngineRequest.build(model=MODEL, prompt_token_ids=[1, 2], sampling=SamplingOptions()),
        tokenizer,
    )
    with pytest.raises(EngineUnavailable, match="scripted"):
        await gen.__anext__()
    assert not await client.is_model_ready(MODEL)


async def test_too_much_waiting_work_is_refused_fast(client, tokenizer):
    await announce(client, num_waiting=20)
    gen = client.generate(
        EngineRequest.build(model=MODEL, prompt_token_ids=[1, 2], sampling=SamplingOptions()),
        tokenizer,
    )
    started = time.monotonic()
    with pytest.raises(EngineOverloaded) as info:
        await gen.__anext__()
    assert time.monotonic() - started < 1.0
    assert info.value.retry_after >= 1.0
    # Nothing was queued for an engine.
    assert await client.redis.exists(client.keys.requests(MODEL)) == 0


async def test_a_backlog_behind_a_deleted_entry_still_counts(client, tokenizer):
    # Engines delete each entry once done. While the entry delivered last is deleted, Redis
    # reports no lag for the group; admission counts the entries behind it instead, so the
    # backlog of an engine with no room still refuses new requests.
    await announce(client)
    stream = client.keys.requests(MODEL)
    await client.redis.xgroup_create(stream, protocol.ENGINE_GROUP, id="0", mkstream=True)
    queued = [EngineRequest.build(model=MODEL, prompt_token_ids=[5]).message for _ in range(12)]
    await client.submit(MODEL, queued)
    [(_, read)] = await client.redis.xreadgroup(protocol.ENGINE_GROUP, "e1", {stream: ">"}, count=3)
    last_read = read[-1][0]  # done first, 9 behind it: as the engine does once a request is done
    await client.redis.xack(stream, protocol.ENGINE_GROUP, last_read)
    await client.redis.xdel(stream, last_read)
    [group] = await client.redis.xinfo_groups(stream)
    assert group["lag"] is None  # what Redis cannot tell: the case this test is about
    gen = client.generate(EngineRequest.build(model=MODEL, prompt_token_ids=[5]), tokenizer)
    with pytest.raises(EngineOverloaded, match="requests are waiting"):
        await gen.__anext__()


async def test_a_snapshot_under_a_second_old_admits_and_is_read_again_behind(client):
    """Requests a fraction of a second apart do not each wait on Redis: past the cache's
    quarter second, the snapshot admits at once and a fresh one is read in the background."""
    await announce(client)
    await client.capacity.check(MODEL)
    await client.redis.delete(client.keys.status(MODEL, "e1"))  # the engine went away
    await asyncio.sleep(ADMISSION_CACHE_S + 0.05)
    await client.capacity.check(MODEL)  # admitted on the snapshot it had: no read on its path
    await client.capacity.aclose()  # the read that check started in the background ends
    with pytest.raises(EngineUnavailable):
        await client.capacity.check(MODEL)  # the next request sees the fresh snapshot


async def test_a_stale_snapshot_never_refuses_what_a_fresh_one_admits(client):
    with pytest.raises(EngineUnavailable):
        await client.capacity.check(MODEL)
    await announce(client)  # an engine starts
    await asyncio.sleep(ADMISSION_CACHE_S + 0.05)
    await client.capacity.check(MODEL)  # read again before refusing: admitted
    await announce(client, num_waiting=20)
    await asyncio.sleep(ADMISSION_CACHE_S + 0.05)
    await client.capacity.check(MODEL)  # a stale snapshot admits: the engine had room then
    await client.capacity.aclose()
    with pytest.raises(EngineOverloaded):
        await client.capacity.check(MODEL)
    await announce(client, num_waiting=0)  # the backlog drains
    await asyncio.sleep(ADMISSION_CACHE_S + 0.05)
    await client.capacity.check(MODEL)


async def test_multibyte_text_streams_intact_and_usage_counts(client, tokenizer):
    text = "naïve 日本語 🙂 fin"
    ids = tokenizer.encode(text)
    await announce(client)
    async with ScriptedEngine(client, lambda r: one_token_per_step(r, ids)):
        chunks = await collect(
            client.generate(
                EngineRequest.build(
                    model=MODEL,
                    prompt_token_ids=[5, 6, 7],
                    sampling=SamplingOptions(max_tokens=len(ids)),
                ),
                tokenizer,
            )
        )
    assert "".join(c.text for c in chunks) == text
    assert all("\ufffd" not in c.text for c in chunks)
    last = chunks[-1]
    assert (last.finish_reason, last.completion_tokens, last.prompt_tokens) == (
        "length",
        len(ids),
        3,
    )
    assert last.cached_tokens == 2
    assert [t for c in chunks for t in c.token_ids] == ids
    # The reader trims what it read once it has caught up (a read that finds nothing new).
    outputs = client.keys.outputs(client.frontend_id)
    deadline = asyncio.get_running_loop().time() + 3 * READ_BLOCK_MS / 1000
    while await client.redis.xlen(outputs) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
    assert await client.redis.xlen(outputs) == 0


async def test_stop_string_across_tokens_is_cut_and_aborts_engine(client, tokenizer):
    text = "alpha beta<|stop|> gamma delta"
    ids = tokenizer.encode(text)
    await announce(client)
    async with ScriptedEngine(client, lambda r: one_token_per_step(r, ids)) as engine:
        chunks = await collect(
            client.generate(
                EngineRequest.build(
                    model=MODEL,
                    prompt_token_ids=[5],
                    sampling=SamplingOptions(max_tokens=50),
                    output=OutputOptions(stop=("ta<|st",)),
                    request_id="stop-1",
                ),
                tokenizer,
            )
        )
        await asyncio.sleep(0.1)
        assert engine.requests[0].request_id == "stop-1"
    assert "".join(c.text for c in chunks) == "alpha be"
    assert (chunks[-1].finish_reason, chunks[-1].stop_reason) == ("stop", "ta<|st")
    # Tokens counted up to the one that completed the stop string, not the rest.
    assert chunks[-1].completion_tokens < len(ids)
    assert await client.redis.exists(client.keys.aborted("stop-1")) == 1


async def test_stop_string_kept_when_asked(client, tokenizer):
    ids = tokenizer.encode("one two three four")
    await announce(client)
    async with ScriptedEngine(client, lambda r: one_token_per_step(r, ids)):
        chunks = await collect(
            client.generate(
                EngineRequest.build(
                    model=MODEL,
                    prompt_token_ids=[5],
                    sampling=SamplingOptions(),
                    output=OutputOptions(stop=("o thr",), include_stop_str_in_output=True),
                ),
                tokenizer,
            )
        )
    assert "".join(c.text for c in chunks) == "one two thr"


async def test_engine_error_event_raises(client, tokenizer):
    await announce(client)

    def script(r):
        return [
            [protocol.RequestDelta(request_id=r.request_id, new_token_ids=[9])],
            [protocol.RequestDelta(request_id=r.request_id, error="engine died")],
        ]

    async with ScriptedEngine(client, script):
        gen = client.generate(
            EngineRequest.build(model=MODEL, prompt_token_ids=[5], sampling=SamplingOptions()),
            tokenizer,
        )
        first = await gen.__anext__()
        assert first.token_ids == [9]
        with pytest.raises(EngineError, match="engine died"):
            await gen.__anext__()


async def test_silent_engine_times_out(client, tokenizer, monkeypatch):
    monkeypatch.setattr(engine_client, "QUEUED_PATIENCE", 2)
    client.silence_timeout = 0.3
    await announce(client)

    def script(r):
        return [[protocol.RequestDelta(request_id=r.request_id, new_token_ids=[9])], "silence"]

    async with ScriptedEngine(client, script):
        gen = client.generate(
            EngineRequest.build(
                model=MODEL, prompt_token_ids=[5], sampling=SamplingOptions(), request_id="quiet"
            ),
            tokenizer,
        )
        await gen.__anext__()
        with pytest.raises(EngineTimeout, match="sent nothing"):
            await gen.__anext__()
    await asyncio.sleep(0.1)
    assert await client.redis.exists(client.keys.aborted("quiet")) == 1


async def test_a_started_request_waits_out_a_pause_of_its_live_engine(client, tokenizer):
    # An overloaded engine may preempt a request for longer than one silence timeout; while
    # the engine is alive the request waits instead of being resumed (redoing its work).
    client.silence_timeout = 0.3
    await announce(client)

    def script(r):
        return [
            [protocol.RequestDelta(request_id=r.request_id, new_token_ids=[9])],
            1.0,
            [
                protocol.RequestDelta(
                    request_id=r.request_id, new_token_ids=[9], finish_reason="length"
                )
            ],
        ]

    async with ScriptedEngine(client, script) as engine:
        gen = client.generate(
            EngineRequest.build(
                model=MODEL, prompt_token_ids=[5], sampling=SamplingOptions(), request_id="paused"
            ),
            tokenizer,
        )
        chunks = [chunk async for chunk in gen]
    assert [c.token_ids for c in chunks] == [[9], [9]]
    assert [r.request_id for r in engine.requests] == ["paused"]  # never re-submitted


async def test_a_submitted_request_leaves_its_tenants_lane_before_any_output(client, tokenizer):
    # The API's lanes (controlplane/common/tenant_lanes.py) hold a tenant's next request while
    # one does its pre-engine work; waiting on the engine is not such work.
    from controlplane.common.tenant_lanes import TenantLanes

    await announce(client)
    lanes = TenantLanes(width=1, lease_s=60)

    def script(r):
        done = protocol.RequestDelta(
            request_id=r.request_id, new_token_ids=[9], finish_reason="length"
        )
        return [0.5, [done]]  # the engine takes its time before the first token

    async def request():
        await lanes.enter("A")
        gen = client.generate(
            EngineRequest.build(model=MODEL, prompt_token_ids=[5], sampling=SamplingOptions()),
            tokenizer,
        )
        return await collect(gen)

    async with ScriptedEngine(client, script):
        first = asyncio.create_task(request())
        await asyncio.sleep(0.05)
        nxt = asyncio.create_task(lanes.enter("A"))
        await asyncio.wait_for(asyncio.shield(nxt), timeout=0.3)  # let in before any output
        assert not first.done()
        chunks = await first
    assert [c.token_ids for c in chunks] == [[9]]


async def test_requests_that_end_leave_nothing_for_the_silence_watch(client, tokenizer):
    # Finished or closed early, a request stops being watched: an API process that
    # served many keeps no queue of theirs (inference/transport/silence_watch.py).
    await announce(client)
    ids = tokenizer.encode("a long answer that goes on and on")
    async with ScriptedEngine(client, lambda r: one_token_per_step(r, ids)):
        for n in range(3):
            gen = client.generate(
                EngineRequest.build(
                    model=MODEL,
                    prompt_token_ids=[5],
                    sampling=SamplingOptions(),
                    request_id=f"w{n}",
                ),
                tokenizer,
            )
            if n == 0:
                await collect(gen)
            else:
                await gen.__anext__()
                assert len(client.silence._queues) == 1  # watched while it runs
                await gen.aclose()
    assert not client.silence._queues


async def test_closing_the_stream_aborts_in_engine(client, tokenizer):
    await announce(client)
    ids = tokenizer.encode("a long answer that goes on and on")
    async with ScriptedEngine(client, lambda r: one_token_per_step(r, ids)):
        gen = client.generate(
            EngineRequest.build(
                model=MODEL, prompt_token_ids=[5], sampling=SamplingOptions(), request_id="closed"
            ),
            tokenizer,
        )
        await gen.__anext__()
        await gen.aclose()
        await asyncio.sleep(0.1)
    assert await client.redis.exists(client.keys.aborted("closed")) == 1
    entries = await client.redis.xrange(client.keys.aborts())
    assert [protocol.decode_control(f[FIELD]).request_id for _, f in entries] == ["closed"]


async def test_a_client_that_leaves_while_its_request_is_sent_never_waits_on_the_engine(
    client, tokenizer
):
    """Cancelled at any moment of admission and sending (redis-py's commands drop about one
    cancellation in ten there on Python 3.11: controlplane/common/cancellation.py), a
    generation ends at once as cancelled, and whatever reached the stream is aborted; it never
    goes on to wait for output nobody will read."""
    client.max_waiting = 10_000
    await announce(client)  # an engine that never reads: a request that was sent stays there
    stream = client.keys.requests(MODEL)
    await client.redis.xgroup_create(stream, protocol.ENGINE_GROUP, id="0", mkstream=True)
    rng = random.Random(7)
    sent_ids = []
    for trial in range(150):
        request = EngineRequest.build(
            model=MODEL, prompt_token_ids=[5], sampling=SamplingOptions(), request_id=f"r{trial}"
        )
        task = asyncio.create_task(collect(client.generate(request, tokenizer)))
        # Admission and XADD take about a millisecond on a slow host and much less on a fast
        # one, where even the shortest sleep let every request reach the stream: every fifth
        # client leaves before its task has run at all.
        if trial % 5:
            await asyncio.sleep(rng.random() * 0.002)
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=1.0)
        assert done, f"trial {trial}: the generation went on after its client left"
        assert task.cancelled()
        sent_ids.append(request.request_id)
    await asyncio.sleep(0.2)  # the aborts go in tasks of their own
    entries = await client.redis.xrange(stream)
    in_stream = {protocol.decode_request(f[FIELD]).request_id for _, f in entries}
    aborted = {
        protocol.decode_control(f[FIELD]).request_id
        for _, f in await client.redis.xrange(client.keys.aborts())
    }
    assert in_stream <= aborted and 0 < len(in_stream) < len(sent_ids)


async def test_parallel_samples_finish_independently(client, tokenizer):
    await announce(client)

    def script(r):
        d = protocol.RequestDelta
        return [
            [
                d(request_id=r.request_id, index=0, new_token_ids=tokenizer.encode("ab")),
                d(request_id=r.request_id, index=1, new_token_ids=tokenizer.encode("cd")),
            ],
            [
                d(
                    request_id=r.request_id,
                    index=1,
                    new_token_ids=[],
                    finish_reason="stop",
                    stop_reason=None,
                )
            ],
            [
                d(
                    request_id=r.request_id,
                    index=0,
                    new_token_ids=tokenizer.encode("e"),
                    finish_reason="length",
                )
            ],
        ]

    async with ScriptedEngine(client, script):
        chunks = await collect(
            client.generate(
                EngineRequest.build(
                    model=MODEL, prompt_token_ids=[5], sampling=SamplingOptions(n=2)
                ),
                tokenizer,
            )
        )
    by_index = {0: "", 1: ""}
    for c in chunks:
        by_index[c.index] += c.text
    assert by_index == {0: "abe", 1: "cd"}
    assert {c.index: c.finish_reason for c in chunks if c.finish_reason} == {0: "length", 1: "stop"}


async def test_bad_prompt_is_refused_before_redis(client, tokenizer):
    with pytest.raises(ValueError, match="prompt_token_ids"):
        await client.generate(
            EngineRequest.build(model=MODEL, prompt_token_ids=[], sampling=SamplingOptions()),
            tokenizer,
        ).__anext__()


async def test_for_process_is_one_client_per_event_loop_from_settings(settings, redis_server):
    settings.REDIS_URL = redis_server.url
    settings.PLATFORM_REDIS_PREFIX = "fromsettings"
    settings.ENGINE_SILENCE_TIMEOUT = 7.5
    settings.ENGINE_MAX_WAITING = 3
    first = EngineClient.for_process()
    assert EngineClient.for_process() is first
    assert (first.keys.prefix, first.silence_timeout, first.max_waiting) == ("fromsettings", 7.5, 3)

    def in_another_loop():
        async def get():
            return EngineClient.for_process()

        return asyncio.run(get())

    assert await asyncio.to_thread(in_another_loop) is not first


async def test_a_burst_beyond_100_connections_waits_instead_of_failing(client, tokenizer):
    client.max_waiting = 10_000
    await announce(client)
    ids = tokenizer.encode("ok")
    async with ScriptedEngine(client, lambda r: one_token_per_step(r, ids)):
        results = await asyncio.gather(
            *[
                collect(
                    client.generate(
                        EngineRequest.build(
                            model=MODEL, prompt_token_ids=[5], sampling=SamplingOptions()
                        ),
                        tokenizer,
                    )
                )
                for _ in range(150)
            ]
        )
    assert all("".join(c.text for c in chunks) == "ok" for chunks in results)
    # Readiness checks from hundreds of requests at once: more commands in flight than
    # redis-py's default asyncio pool (100) allows.
    ready = await asyncio.gather(*[client.is_model_ready(MODEL) for _ in range(300)])
    assert all(ready)
