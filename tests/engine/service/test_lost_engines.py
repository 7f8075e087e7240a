"""A request whose engines keep dying is not run a third time (engine/service/recovery.py).

Before, a request that crashed whichever engine held it before its first token (a native
crash, the OOM killer) was claimed and rerun by every survivor in turn, taking each engine
down as the node agents restarted them. The Redis state such deaths leave is built here
directly (dead engines are consumers without a status key) and a live engine takes over.
"""

from __future__ import annotations

import uuid

import pytest

from controlplane.launcher.redis_server import RedisServer
from engine import protocol
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.protocol import ENGINE_GROUP, FIELD, LOST_FIELD, Keys
from engine.redis_streams import connect, ensure_group
from engine.service import EngineService, ServiceSettings
from engine.service.redis_input import NewRequest

MODEL = "m"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def service(tiny_llama, server):
    engine = LLMEngine(EngineConfig(model=str(tiny_llama), device="cpu", max_num_seqs=2))
    settings = ServiceSettings(
        model_name=MODEL,
        redis_url=server.url,
        prefix=f"lost{uuid.uuid4().hex[:6]}",
        engine_id="survivor",
    )
    return EngineService(engine, settings)  # its threads are never started


def _request(request_id: str, n: int = 1) -> bytes:
    request = protocol.GenerateRequest(
        request_id=request_id,
        frontend_id="fe",
        prompt_token_ids=[5, 6, 7],
        sampling=protocol.SamplingOptions(max_tokens=4, n=n),
    )
    return protocol.encode(request)


def _read_as(client, stream: str, consumer: str, count: int) -> None:
    client.xreadgroup(ENGINE_GROUP, consumer, {stream: ">"}, count=count)


def _errors(client, keys: Keys) -> dict[tuple[str, int], str]:
    batches = [protocol.decode_outputs(f[FIELD]) for _, f in client.xrange(keys.outputs("fe"))]
    return {(d.request_id, d.index): d.error for b in batches for d in b.deltas if d.error}


def _taken_up(service) -> list[str]:
    events = service.inbox.take_all()
    return [e.request.request_id for e in events if isinstance(e, NewRequest)]


def test_requests_held_by_two_lost_engines_fail_and_the_others_run(service, server):
    client = connect(server.url)
    keys, stream = Keys(service.settings.prefix), service.requests
    ensure_group(client, stream)
    for request_id in ("poison", "bystander"):
        client.xadd(stream, {FIELD: _request(request_id, n=2 if request_id == "poison" else 1)})
    _read_as(client, stream, "first", 2)  # "first" died holding both...
    pending = client.xpending_range(stream, ENGINE_GROUP, "-", "+", 10, "first")
    ids = [p["message_id"] for p in pending]
    client.xclaim(stream, ENGINE_GROUP, "second", 0, ids)  # ...and so did "second" after it
    client.xadd(stream, {FIELD: _request("fresh")})
    _read_as(client, stream, "second", 1)  # read by "second" alone: one lost engine

    service.reaper.take_over("second")

    errors = _errors(client, keys)
    assert set(errors) == {("poison", 0), ("poison", 1), ("bystander", 0)}
    assert errors[("poison", 0)].startswith(f"2 engines serving {MODEL!r} stopped")
    assert _taken_up(service) == ["fresh"]
    assert client.xlen(stream) == 1  # the two failed entries deleted, acknowledged
    assert client.xpending(stream, ENGINE_GROUP)["pending"] == 1  # "fresh", now the survivor's


def test_the_count_survives_a_move_off_a_dead_engines_direct_stream(service, server):
    """A routed request's entry is re-added to the shared stream when its engine dies, which
    starts it undelivered: the engines it was lost with travel in its LOST_FIELD."""
    client = connect(server.url)
    keys, stream = Keys(service.settings.prefix), service.requests
    ensure_group(client, stream)
    direct = keys.direct_requests(MODEL, "routed-to")
    ensure_group(client, direct)
    client.xadd(direct, {FIELD: _request("routed")})
    client.xadd(direct, {FIELD: _request("unread")})
    _read_as(client, direct, "routed-to", 1)  # it died holding "routed"

    service.reaper.take_over("routed-to")
    moved = {protocol.decode_request(f[FIELD]).request_id: f for _, f in client.xrange(stream)}
    assert moved["routed"][LOST_FIELD] == b"1" and LOST_FIELD not in moved["unread"]
    assert not client.exists(direct)

    _read_as(client, stream, "next", 2)  # the next engine to read them died too
    service.reaper.take_over("next")
    assert set(_errors(client, keys)) == {("routed", 0)}
    assert _taken_up(service) == ["unread"]  # lost once: it runs
