"""The prefix router's rule against a real Redis: engine status records and prefix indexes are
written as engines write them (the hashes by the engine's own hashing), and the router decides.

The end-to-end behaviour with real engines (the request lands where its prefix is cached,
routed requests of a killed engine complete elsewhere) is tests/engine/service/
test_prefix_routing.py's.
"""

from __future__ import annotations

import time

import pytest
import redis.asyncio as aioredis

from engine import protocol
from engine.adapters import AdapterIdentity
from engine.core.block_hash import PublicPrefix, chain_block_hashes
from engine.direct_routing import PREFIX_INDEX_BYTES, index_member
from engine.protocol import FIELD, EngineStatus, Keys
from inference.transport.prefix_router import PrefixRouter, Route

MODEL = "m"
BLOCK = 16
SYSTEM = list(range(100, 100 + 40 * BLOCK))  # a 640-token shared system prompt


@pytest.fixture
async def redis(redis_server):
    client = aioredis.Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


@pytest.fixture
def keys() -> Keys:
    return Keys(f"route{time.monotonic_ns()}")


def status(engine_id: str, **fields) -> EngineStatus:
    fields = {"max_num_seqs": 8, "block_size": BLOCK, "updated_at": 1.0, **fields}
    return EngineStatus(engine_id=engine_id, model=MODEL, **fields)


def message(prompt: list[int], *, salt: str = "tenant-a", **fields) -> protocol.GenerateRequest:
    return protocol.GenerateRequest(
        request_id=f"r{time.monotonic_ns()}",
        frontend_id="f",
        prompt_token_ids=prompt,
        cache_salt=salt,
        **fields,
    )


async def holds(redis, keys, engine_id: str, prompt: list[int], **hashing) -> None:
    """Write ``engine_id``'s prefix index as the engine would after serving ``prompt``."""
    hashing = {"cache_salt": "tenant-a", "adapter": None, "public_prefix": None, **hashing}
    hashes = chain_block_hashes(prompt, BLOCK, **hashing)
    await redis.sadd(keys.prefix_index(MODEL, engine_id), *map(index_member, hashes))


async def test_a_prompt_goes_to_the_replica_holding_its_prefix(redis, keys):
    router = PrefixRouter(redis, keys)
    await holds(redis, keys, "e2", [*SYSTEM, 7, 8, 9])
    engines = [status("e1"), status("e2"), status("e3")]

    route = await router.choose(message([*SYSTEM, 1, 2, 3, 4]), engines)

    assert route == Route("e2", len(SYSTEM), "holds its prefix")


async def test_another_tenant_sending_the_same_tokens_is_not_routed_by_that_cache(redis, keys):
    # The index holds tenant A's salted hashes: tenant B's hashes of the same tokens differ,
    # so the router neither finds nor reveals A's cache.
    router = PrefixRouter(redis, keys)
    await holds(redis, keys, "e2", SYSTEM)
    engines = [status("e1"), status("e2")]

    route = await router.choose(message([*SYSTEM, 1], salt="tenant-b"), engines)

    # A new prefix to the router: placed by demand (both idle: the first), not on e2.
    assert route == Route("e1", 0, "a new prefix, least demand")


async def test_a_declared_public_prefix_is_found_across_tenants_up_to_its_boundary(redis, keys):
    public = PublicPrefix("shared-v1", 20 * BLOCK)
    router = PrefixRouter(redis, keys)
    await holds(redis, keys, "e1", SYSTEM, public_prefix=public, cache_salt="tenant-a")
    engines = [status("e1"), status("e2")]
    shared = {"shared_prefix_salt": public.salt, "shared_prefix_tokens": public.num_tokens}

    route = await router.choose(message(SYSTEM, salt="tenant-b", **shared), engines)

    # Tenant B finds the public blocks, none of tenant A's after the boundary.
    assert route.cached_tokens == public.num_tokens
    smaller = PublicPrefix("shared-v1", 30 * BLOCK)
    await holds(redis, keys, "e1", SYSTEM, public_prefix=smaller, cache_salt="tenant-a")
    shared["shared_prefix_tokens"] = smaller.num_tokens
    route = await router.choose(message(SYSTEM, salt="tenant-b", **shared), engines)
    assert route == Route("e1", smaller.num_tokens, "holds its prefix")


async def test_a_busy_or_backlogged_holder_loses_to_the_shared_stream(redis, keys):
    router = PrefixRouter(redis, keys)
    await holds(redis, keys, "e2", SYSTEM)
    prompt = message([*SYSTEM, 1, 2])

    backlogged = [status("e1"), status("e2", num_running=8, num_waiting=8)]
    assert (await router.choose(prompt, backlogged)).reason == "e2 is backlogged"

    # Busy but not backlogged: still worth it when most of the prompt is cached ...
    busy = [status("e1"), status("e2", num_running=8, num_waiting=4)]
    assert (await router.choose(prompt, busy)).engine_id == "e2"
    # ... not when only a small part is.
    long_tail = message(SYSTEM + list(range(5000, 5000 + 2 * len(SYSTEM))))
    assert (await router.choose(long_tail, busy)).reason == "no replica is clearly better"


async def test_one_replica_or_a_short_prompt_never_routes(redis, keys):
    router = PrefixRouter(redis, keys)
    await holds(redis, keys, "e1", SYSTEM)
    assert (await router.choose(message(SYSTEM), [status("e1")])).engine_id == ""
    short = await router.choose(message(SYSTEM[: BLOCK - 1]), [status("e1"), status("e2")])
    assert short.reason == "prompt shorter than a block"
    # An engine without prefix caching publishes no block size: never a routing target.
    no_cache = [status("e1", block_size=0), status("e2", block_size=0)]
    assert (await router.choose(message(SYSTEM), no_cache)).engine_id == ""


async def test_an_adapter_request_is_routed_by_that_adapters_blocks_and_only_where_loaded(
    redis, keys
):
    router = PrefixRouter(redis, keys)
    adapter = AdapterIdentity("sql", "c0ffee")
    await holds(redis, keys, "e1", SYSTEM, adapter=adapter)
    await holds(redis, keys, "e2", SYSTEM)  # the base model's blocks: not the adapter's
    loaded = {"adapters": ["sql"], "adapter_checksums": {"sql": "c0ffee"}}
    request = message([*SYSTEM, 1], adapter=protocol.AdapterRef(name="sql", checksum="c0ffee"))

    route = await router.choose(request, [status("e1", **loaded), status("e2", **loaded)])
    assert route.engine_id == "e1"
    # Where the adapter is not loaded, its cached blocks do not count: a new prefix, placed
    # on the one replica that can serve it.
    route = await router.choose(request, [status("e1"), status("e2", **loaded)])
    assert route == Route("e2", 0, "a new prefix, least demand")


async def test_a_burst_spreads_once_the_holder_fills_up(redis, keys):
    # Status records refresh about once a second: the router counts what it routed since, so
    # a burst of one prefix does not all pile onto one replica.
    router = PrefixRouter(redis, keys)
    await holds(redis, keys, "e2", SYSTEM)
    engines = [status("e1"), status("e2")]
    for model_key in (keys.status(MODEL, "e1"), keys.status(MODEL, "e2")):
        await redis.set(model_key, b"{}")
    routes = [await router.send(MODEL, message([*SYSTEM, 1]), engines) for _ in range(12)]
    routed = [route.engine_id == "e2" for route in routes]
    assert routed == [True] * 8 + [False] * 4  # 8: its batch
    assert routes[8] == Route("", len(SYSTEM), "e2 is backlogged")
    assert await redis.xlen(keys.direct_requests(MODEL, "e2")) == routed.count(True)
    assert await redis.xlen(keys.requests(MODEL)) == routed.count(False)


async def test_a_route_to_an_engine_whose_status_expired_lands_in_the_shared_stream(redis, keys):
    # The router decides from status records up to a quarter of a second old; the engine's
    # status key is checked again in the same script that adds the request.
    router = PrefixRouter(redis, keys)
    await holds(redis, keys, "e1", SYSTEM)
    engines = [status("e1"), status("e2")]
    request = message(SYSTEM)
    await redis.set(keys.status(MODEL, "e1"), b"{}")
    assert await router.send(MODEL, request, engines) == Route("e1", 640, "holds its prefix")
    await redis.delete(keys.status(MODEL, "e1"))
    assert await router.send(MODEL, request, engines) == Route("", 640, "e1 is gone")
    assert await router.submit(MODEL, request, Route("e1", 640, "holds its prefix")) is False

    shared = await redis.xrange(keys.requests(MODEL))
    direct = await redis.xrange(keys.direct_requests(MODEL, "e1"))
    assert len(shared) == 2 and len(direct) == 1
    assert protocol.decode_request(shared[0][1][FIELD]) == request


async def test_choosing_adds_nothing_and_sending_is_one_round_trip(redis, keys, monkeypatch):
    router = PrefixRouter(redis, keys)
    await holds(redis, keys, "e2", SYSTEM)
    engines = [status("e1"), status("e2"), status("e3")]
    await redis.set(keys.status(MODEL, "e2"), b"{}")

    await router.choose(message([*SYSTEM, 1]), engines)
    assert await redis.xlen(keys.direct_requests(MODEL, "e2")) == 0
    assert await redis.xlen(keys.requests(MODEL)) == 0

    sent = spy_on_commands(redis, monkeypatch)
    route = await router.send(MODEL, message([*SYSTEM, 1]), engines)
    assert [command[0] for command in sent] == ["EVALSHA"]
    assert route.engine_id == "e2"
    assert await redis.xlen(keys.direct_requests(MODEL, "e2")) == 1


async def live(redis, keys, *engine_ids: str) -> None:
    """Status keys for ``engine_ids``: a direct stream is only written while one exists."""
    for engine_id in engine_ids:
        await redis.set(keys.status(MODEL, engine_id), b"{}")


def conversation(tenant: int, turns: int) -> list[int]:
    """A tenant's prompt after ``turns`` turns: its own system prompt, then 40 tokens a turn."""
    start = 10_000 * (tenant + 1)
    return list(range(start, start + len(SYSTEM) + 40 * turns))


async def test_new_conversations_spread_and_each_next_turn_follows_before_the_index_shows_it(
    redis, keys
):
    router = PrefixRouter(redis, keys)
    engines = [status("e1"), status("e2"), status("e3")]
    await live(redis, keys, "e1", "e2", "e3")

    first_turns = [await router.send(MODEL, message(conversation(t, 1)), engines) for t in range(6)]
    placed = [route.engine_id for route in first_turns]
    assert sorted(placed) == ["e1", "e1", "e2", "e2", "e3", "e3"]
    assert {route.reason for route in first_turns} == {"a new prefix, least demand"}

    # The engines have published nothing yet (their indexes are empty): the router's memory
    # of what it sent keeps each conversation where its first turn went.
    second_turns = [
        await router.send(MODEL, message(conversation(t, 2)), engines) for t in range(6)
    ]
    assert [route.engine_id for route in second_turns] == placed
    assert {route.cached_tokens for route in second_turns} == {len(SYSTEM) + 32}  # full blocks
    for engine_id in ("e1", "e2", "e3"):
        assert await redis.xlen(keys.direct_requests(MODEL, engine_id)) == 4
    assert await redis.xlen(keys.requests(MODEL)) == 0


async def test_a_new_conversation_goes_where_recent_demand_is_least_among_the_least_busy(
    redis, keys
):
    router = PrefixRouter(redis, keys)
    router.memory.remember("e1", b"", PREFIX_INDEX_BYTES, 3 * 700)  # three conversations
    assert router.memory.demand("e1") > 0 == router.memory.demand("e2")

    # All three idle: e1 has the demand of three conversations, e2 and e3 none (the first).
    idle = [status(e) for e in ("e1", "e2", "e3")]
    assert (await router.choose(message(conversation(9, 1)), idle)).engine_id == "e2"
    # At most one request busier than the least busy still counts as idle ...
    one_more = [status("e1"), status("e2", num_running=1)]
    assert (await router.choose(message(conversation(9, 1)), one_more)).engine_id == "e2"
    # ... two more does not, and a replica without room is never chosen.
    busier = [status("e1"), status("e2", num_running=2)]
    assert (await router.choose(message(conversation(9, 1)), busier)).engine_id == "e1"
    full = [status(e, num_running=8, num_waiting=8) for e in ("e1", "e2")]
    assert await router.choose(message(conversation(9, 1)), full) == Route(
        "", 0, "no replica holds its prefix"
    )


def spy_on_commands(redis, monkeypatch) -> list[tuple]:
    """The commands ``redis`` sends from now on, each a round trip (pipelines are refused)."""
    sent: list[tuple] = []
    execute = redis.execute_command

    async def recorded(*args, **options):
        sent.append(args)
        return await execute(*args, **options)

    def no_pipeline(*args, **kwargs):
        raise AssertionError("a pipeline: more than one command")

    monkeypatch.setattr(redis, "execute_command", recorded)
    monkeypatch.setattr(redis, "pipeline", no_pipeline)
    return sent
