"""The generation use case over the real EngineClient, Redis and a scripted engine: the
requests engines receive, detokenized text, and aborts when the client goes away."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aioredis

from controlplane.adapters.selectors import AdapterRoute
from engine import protocol
from engine.protocol import SamplingOptions
from engine.text.tokenizer import ChatTokenizer
from inference.errors import error_from_exception
from inference.transport.engine_client import EngineClient, EngineUnavailable
from tests.support.generation_factories import HANG, MODEL, billed, generation_for, make_plan


class ScriptedEngine:
    """Serves MODEL's request stream: answers each request with ``script(request)``, a list
    of steps, each a list of RequestDeltas sent as one OutputBatch (HANG: go quiet). Its status
    record lists ``adapters`` (name -> checksum) as loaded."""

    def __init__(self, client: EngineClient, script, *, adapters: dict[str, str] | None = None):
        kwargs = client.redis.connection_pool.connection_kwargs
        self.redis = aioredis.Redis(host=kwargs["host"], port=kwargs["port"], db=kwargs["db"])
        self.keys, self.script = client.keys, script
        self.adapters = dict(adapters or {})
        self.requests: list[protocol.GenerateRequest] = []  # as the engine received them
        self.stopping = False

    async def __aenter__(self):
        stream = self.keys.requests(MODEL)
        await self.redis.xgroup_create(stream, protocol.ENGINE_GROUP, id="0", mkstream=True)
        status = protocol.EngineStatus(
            engine_id="e1",
            model=MODEL,
            max_num_seqs=4,
            adapters=sorted(self.adapters),
            adapter_checksums=self.adapters,
        )
        await self.redis.set(self.keys.status(MODEL, "e1"), protocol.encode_status(status))
        await self.redis.sadd(self.keys.engines(), protocol.engine_member(MODEL, "e1"))
        self.task = asyncio.create_task(self._serve(stream))
        return self

    async def __aexit__(self, *exc):
        self.stopping = True  # a blocked XREADGROUP may not end on cancel: let the loop end
        await asyncio.wait({self.task}, timeout=2)
        self.task.cancel()
        await self.redis.aclose()

    async def _serve(self, stream):
        while not self.stopping:
            read = await self.redis.xreadgroup(
                protocol.ENGINE_GROUP, "e1", {stream: ">"}, count=10, block=100
            )
            for _stream, entries in read or []:
                for _id, fields in entries:
                    request = protocol.decode_request(fields[protocol.FIELD])
                    self.requests.append(request)
                    for step in self.script(request):
                        if step == HANG:
                            break
                        batch = protocol.OutputBatch(engine_id="e1", deltas=step)
                        outputs = self.keys.outputs(request.frontend_id)
                        await self.redis.xadd(outputs, {protocol.FIELD: protocol.encode(batch)})


def one_token_per_step(request, token_ids, *, finish_reason="length", then=()):
    steps = [
        [
            protocol.RequestDelta(
                request_id=request.request_id,
                new_token_ids=[token_id],
                finish_reason=finish_reason if i == len(token_ids) - 1 and not then else None,
                num_prompt_tokens=len(request.prompt_token_ids),
                num_cached_tokens=2,
            )
        ]
        for i, token_id in enumerate(token_ids)
    ]
    return [*steps, *then]


@pytest.fixture(scope="module")
def tokenizer(tiny_llama):
    return ChatTokenizer(tiny_llama)


@pytest.fixture
async def client(redis_client, redis_server):
    client = EngineClient(redis_server.url, prefix=f"uc{time.monotonic_ns()}", silence_timeout=2.0)
    yield client
    await client.close()


async def test_no_live_engine_is_503_and_bills_nothing(usage_events, client):
    plan = make_plan(prompts=[("Hello", [7, 8, 9, 10])])
    generation = await generation_for(plan)
    with pytest.raises(EngineUnavailable) as info:
        await generation.open(client)
    assert error_from_exception(info.value).status == 503
    # Planned with 4 prompt tokens, but no engine took it: nothing to bill.
    assert [billed(e) for e in await usage_events()] == [(503, 0, 0, "")]


async def test_stream_through_redis_detokenizes_and_bills(usage_events, client, tokenizer):
    ids = tokenizer.encode("naïve 日本語 fin")
    plan = make_plan(
        prompts=[("Hello", [7, 8, 9])], max_tokens=len(ids), stream=True, include_usage=True
    )
    generation = await generation_for(plan, tokenizer=tokenizer)
    async with ScriptedEngine(client, lambda r: one_token_per_step(r, ids)):
        await generation.open(client)
        events = [event async for event in generation.events()]
    contents = [e["choices"][0]["delta"].get("content") for e in events if e["choices"]]
    assert "".join(c for c in contents if c) == "naïve 日本語 fin"
    assert all("\ufffd" not in (c or "") for c in contents)
    assert events[-1]["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": len(ids),
        "total_tokens": 3 + len(ids),
        "prompt_tokens_details": {"cached_tokens": 2},
    }
    assert [billed(e) for e in await usage_events()] == [(200, 3, len(ids), "length")]


async def test_client_gone_mid_stream_aborts_the_engine_request(
    usage_events, client, tokenizer, redis_client
):
    ids = tokenizer.encode("one two")
    plan = make_plan(stream=True)
    generation = await generation_for(plan, tokenizer=tokenizer)
    async with ScriptedEngine(client, lambda r: one_token_per_step(r, ids, then=[HANG])):
        await generation.open(client)
        events = generation.events()
        seen = [await anext(events) for _ in range(len(ids) + 1)]  # the role chunk first
        await events.aclose()
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in seen) == "one two"
    await client.close()  # waits for the abort it sent in the background
    assert redis_client.exists(client.keys.aborted(plan.request_id)) == 1
    assert [billed(e) for e in await usage_events()] == [(499, 3, len(ids), "")]


async def test_each_prompt_reaches_the_base_model_engines_as_its_own_request(
    usage_events, client, tokenizer
):
    route = AdapterRoute(name="pirate", base_model=MODEL, checksum="c1", path="/l", created=0)
    plan = make_plan(
        "completion",
        prompts=[("Once", [11, 12]), ("Twice", [21, 22, 23])],
        n=2,
        model="pirate",
        engine_model=MODEL,
        adapter=route,
        cache_salt="tenant-salt",
        engine_tenant="t7",  # the tenant as engines know it: an opaque id, never its name
        priority=2,
    )
    generation = await generation_for(plan, tokenizer=tokenizer)
    word = {2: tokenizer.encode(" upon"), 3: tokenizer.encode(" more")}

    def script(request):
        ids = word[len(request.prompt_token_ids)]
        return [
            [
                protocol.RequestDelta(
                    request_id=request.request_id,
                    index=i,
                    new_token_ids=ids,
                    finish_reason="length",
                )
                for i in range(2)
            ]
        ]

    async with ScriptedEngine(client, script, adapters={"pirate": "c1"}) as engine:
        await generation.open(client)
        response = await generation.response()
    assert [c["text"] for c in response["choices"]] == [" upon", " upon", " more", " more"]
    received = sorted(engine.requests, key=lambda r: r.request_id)
    assert [(r.request_id, r.prompt_token_ids) for r in received] == [
        (f"{plan.request_id}-0", [11, 12]),
        (f"{plan.request_id}-1", [21, 22, 23]),
    ]
    for request in received:
        assert (request.adapter.name, request.adapter.checksum, request.adapter.path) == (
            "pirate",
            "c1",
            "/l",
        )
        assert (request.cache_salt, request.tenant, request.priority) == ("tenant-salt", "t7", 2)
        assert request.sampling == SamplingOptions(n=2, max_tokens=16)
    [event] = await usage_events()
    assert (event.model, event.adapter, event.prompt_tokens, event.status) == (
        "pirate",
        "pirate",
        5,
        200,
    )
