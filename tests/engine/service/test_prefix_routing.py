"""Cache-aware routing with real engines on a real Redis: a conversation's turns land on the
replica that holds its prefix, another tenant's identical prompt is not routed by that cache,
and requests routed to an engine that dies, or drains, complete elsewhere.

The router's rule alone (loads, adapters, public prefixes) is tests/inference/
test_prefix_router.py's.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import uuid

import pytest
import redis

from engine.protocol import Keys
from inference.transport.engine_client import EngineClient, EngineRequest, SamplingOptions
from inference.transport.prefix_router import Route
from tests.engine.service.support import EngineProcess, NoText, offline_greedy, wait_for

MODEL = "routed"
SYSTEM = [5 + (7 * i) % 1000 for i in range(320)]  # 20 blocks of 16 tokens
GREEDY = SamplingOptions(temperature=0.0, max_tokens=6, ignore_eos=True)


@pytest.fixture
def prefix():
    return f"route{uuid.uuid4().hex[:6]}"


@pytest.fixture
def engines(tiny_llama, redis_server, prefix, tmp_path):
    """``engines(name, ...)`` starts live engines; all are stopped after the test."""
    started: list[EngineProcess] = []

    def start(*names: str) -> list[EngineProcess]:
        new = [
            EngineProcess(
                model_path=tiny_llama,
                model_name=MODEL,
                redis_url=redis_server.url,
                prefix=prefix,
                log_dir=tmp_path,
                engine_id=name,
                extra=["--status-interval", "0.25", "--status-ttl", "1.5"],
            )
            for name in names
        ]
        started.extend(new)
        return [engine.wait_live() for engine in new]

    yield start
    for engine in started:
        engine.stop(timeout=10)


@pytest.fixture
async def client(redis_server, prefix):
    client = EngineClient(redis_server.url, prefix=prefix, silence_timeout=60.0)
    yield client
    await client.close()


async def generate(client: EngineClient, prompt: list[int], *, salt: str) -> list[int]:
    request = EngineRequest.build(
        model=MODEL, prompt_token_ids=prompt, sampling=GREEDY, cache_salt=salt
    )
    tokens: list[int] = []
    async for chunk in client.generate(request, NoText()):
        tokens += chunk.token_ids
    return tokens


def routes(caplog) -> list[str]:
    """Where each request went, from the router's trace lines."""
    return [
        r.getMessage().split("routed to ")[1].split(" (")[0]
        for r in caplog.records
        if r.name == "inference.transport.prefix_router"
    ]


async def test_a_conversations_turns_land_on_the_replica_holding_its_prefix(
    engines, client, redis_server, prefix, caplog
):
    caplog.set_level(logging.INFO, logger="inference.transport.prefix_router")
    engines("r1", "r2", "r3")
    keys = Keys(prefix)
    conversation = [*SYSTEM, 11, 12]
    conversation += await generate(client, conversation, salt="tenant-a")
    # Nobody held the first turn: the router placed it, and that engine indexes its blocks.
    index = {name: keys.prefix_index(MODEL, name) for name in ("r1", "r2", "r3")}

    def holder():
        with redis.Redis.from_url(redis_server.url) as conn:
            sizes = {name: conn.scard(key) for name, key in index.items()}
        full = [name for name, size in sizes.items() if size >= len(SYSTEM) // 16]
        return full[0] if len(full) == 1 else None

    first = await asyncio.to_thread(wait_for, holder, 30, "the first turn's prefix indexed")
    for turn in range(5):
        conversation += [20 + turn, 21 + turn]
        conversation += await generate(client, conversation, salt="tenant-a")

    went = routes(caplog)
    assert went == [first] * 6, went
    # Tenant B's identical prompt is hashed under B's salt: A's cache is neither used nor seen.
    b_route = await client.router.choose(
        EngineRequest.build(
            model=MODEL, prompt_token_ids=conversation, cache_salt="tenant-b"
        ).message,
        await client.capacity.routable(MODEL),
    )
    assert b_route.cached_tokens == 0 and b_route.reason == "a new prefix, least demand"


async def route_to_frozen(engine: EngineProcess, client, monkeypatch, prompts) -> tuple:
    """Freeze ``engine`` (SIGSTOP), have the router pick it for ``prompts`` as it would for a
    cached prefix, and return (their tasks, its direct stream) once all wait there unread."""
    engine.process.send_signal(signal.SIGSTOP)

    async def to_frozen(model, message, engines):
        route = Route(engine.engine_id, 320, "holds its prefix")
        assert await client.router.submit(model, message, route)
        return route

    monkeypatch.setattr(client.router, "send", to_frozen)
    tasks = [asyncio.create_task(generate(client, p, salt="tenant-a")) for p in prompts]
    direct = Keys(engine.prefix).direct_requests(MODEL, engine.engine_id)
    await asyncio.to_thread(
        wait_for,
        lambda: engine.redis.xlen(direct) == len(prompts),
        10,
        f"{len(prompts)} requests in {engine.engine_id}'s direct stream",
    )
    return tasks, direct


async def test_requests_routed_to_an_engine_that_dies_complete_elsewhere(
    engines, client, tiny_llama, monkeypatch
):
    victim, survivor = engines("victim", "survivor")
    prompts = [[*SYSTEM, 11 + i] for i in range(3)]
    tasks, direct = await route_to_frozen(victim, client, monkeypatch, prompts)
    victim.process.send_signal(signal.SIGKILL)
    victim.process.wait()

    results = await asyncio.wait_for(asyncio.gather(*tasks), 60)

    expected = await asyncio.to_thread(offline_greedy, tiny_llama, prompts, [6] * 3)
    assert results == expected
    assert not victim.redis.exists(direct)
    assert survivor.process.poll() is None


async def test_requests_routed_to_a_draining_engine_complete_elsewhere(
    engines, client, tiny_llama, monkeypatch
):
    draining, other = engines("draining", "other")
    prompts = [[*SYSTEM, 40 + i] for i in range(2)]
    tasks, direct = await route_to_frozen(draining, client, monkeypatch, prompts)
    # SIGTERM is handled once it runs again: it drains (it may read the two first and hand
    # them back, or leave them to be moved); either way another engine answers them.
    draining.process.send_signal(signal.SIGTERM)
    draining.process.send_signal(signal.SIGCONT)

    results = await asyncio.wait_for(asyncio.gather(*tasks), 60)

    assert results == await asyncio.to_thread(offline_greedy, tiny_llama, prompts, [6] * 2)
    assert draining.process.wait(30) == 0, draining.log_tail()
    assert not draining.redis.exists(direct)
    assert other.process.poll() is None
