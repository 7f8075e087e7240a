"""The multiplexing WebSocket (/v1/ws): several generations on one connection, cancel by id
(slow: against the platform); and its access, in process: scopes mean what they mean over
HTTP, and a revoked key's socket is closed (its generations aborted) with an error frame.

The same faults against a real Daphne and engine are in tests/faults/test_websocket.py.
"""
# ruff: noqa: F811  (the fixtures imported from tests.support.tenant_fixtures are parameters here)

from __future__ import annotations

import asyncio
import json
import logging

import pytest
import websockets
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from controlplane.tenants.services import api_key_revoke
from inference.consumers import CLOSE_CREDENTIAL_REFUSED, GenerationConsumer
from tests.support.tenant_fixtures import _fresh_key_cache, make_key, make_tenant  # noqa: F401 (fixtures)

USER = [{"role": "user", "content": "Tell me about dicts."}]


def _ws_url(platform) -> str:
    return platform.base_url.replace("http://", "ws://") + "/v1/ws"


async def _recv(ws, timeout: float = 30) -> dict:
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


async def _authed(platform):
    ws = await websockets.connect(_ws_url(platform))
    await ws.send(json.dumps({"type": "auth", "api_key": platform.api_key}))
    assert (await _recv(ws))["type"] == "auth.ok"
    return ws


@pytest.mark.slow
async def test_two_generations_multiplexed_match_sse(platform):
    body = {"model": platform.chat_model, "messages": USER, "max_tokens": 8, "temperature": 0}
    expected = platform.sdk().chat.completions.create(**body).choices[0].message.content
    async with await _authed(platform) as ws:
        await ws.send(json.dumps({"type": "chat.completions", "id": "a", "body": body}))
        await ws.send(
            json.dumps(
                {
                    "type": "completions",
                    "id": "b",
                    "body": {
                        "model": platform.chat_model,
                        "prompt": "The",
                        "max_tokens": 5,
                        "stream_options": {"include_usage": True},
                    },
                }
            )
        )
        chunks: dict[str, list[dict]] = {"a": [], "b": []}
        done: set[str] = set()
        while done != {"a", "b"}:
            message = await _recv(ws)
            assert message["type"] in {"chunk", "done"}, message
            if message["type"] == "done":
                done.add(message["id"])
            else:
                chunks[message["id"]].append(message["data"])
    a = chunks["a"]
    assert a[0]["object"] == "chat.completion.chunk"
    assert a[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in a) == expected
    assert [c["choices"][0]["finish_reason"] for c in a if c["choices"][0]["finish_reason"]] == [
        "length"
    ]
    b = chunks["b"]
    assert b[-1]["choices"] == [] and b[-1]["usage"]["completion_tokens"] == 5
    assert b[0]["object"] == "text_completion"


@pytest.mark.slow
async def test_cancel_aborts_in_the_engine(platform):
    platform.wait_engine_idle()
    body = {
        "model": platform.chat_model,
        "messages": USER,
        "max_tokens": 1800,
        "temperature": 0,
        "ignore_eos": True,
    }
    async with await _authed(platform) as ws:
        await ws.send(json.dumps({"type": "chat.completions", "id": "long", "body": body}))
        for _ in range(4):
            assert (await _recv(ws))["type"] == "chunk"
        await ws.send(json.dumps({"type": "cancel", "id": "long"}))
        while True:
            message = await _recv(ws)
            if message["type"] == "done":
                break
        assert message == {"type": "done", "id": "long", "cancelled": True}
        # The connection stays usable after a cancel.
        await ws.send(
            json.dumps(
                {"type": "chat.completions", "id": "next", "body": {**body, "max_tokens": 2}}
            )
        )
        kinds = []
        while not kinds or kinds[-1] != "done":
            kinds.append((await _recv(ws))["type"])
        assert kinds.count("chunk") >= 2
    totals = await asyncio.to_thread(platform.wait_engine_idle)
    assert totals["num_running"] == 0


@pytest.mark.slow
async def test_errors_are_tagged_with_the_id(platform):
    async with websockets.connect(_ws_url(platform)) as ws:
        body = {"model": platform.chat_model, "messages": USER}
        await ws.send(json.dumps({"type": "chat.completions", "id": "x", "body": body}))
        unauthenticated = await _recv(ws)
        assert unauthenticated["type"] == "error" and unauthenticated["status"] == 401
        await ws.send(json.dumps({"type": "auth", "api_key": "sk-wrong"}))
        assert (await _recv(ws))["error"]["code"] == "invalid_api_key"
        await ws.send(json.dumps({"type": "auth", "api_key": platform.api_key}))
        assert (await _recv(ws))["type"] == "auth.ok"
        bad = {**body, "temperature": 5}
        await ws.send(json.dumps({"type": "chat.completions", "id": "bad", "body": bad}))
        error = await _recv(ws)
        assert error["id"] == "bad" and error["status"] == 400
        assert error["error"]["param"] == "temperature"
        await ws.send(
            json.dumps({"type": "chat.completions", "id": "m", "body": {**body, "model": "nope"}})
        )
        assert (await _recv(ws))["error"]["code"] == "model_not_found"
        await ws.send("not json")
        assert (await _recv(ws))["type"] == "error"
        await ws.send(json.dumps({"type": "cancel", "id": "unknown"}))
        assert (await _recv(ws))["error"]["param"] == "id"


@pytest.mark.slow
async def test_authorization_header_at_connect(platform):
    headers = {"Authorization": f"Bearer {platform.api_key}"}
    async with websockets.connect(_ws_url(platform), additional_headers=headers) as ws:
        assert (await _recv(ws))["type"] == "auth.ok"


@pytest.mark.slow
async def test_models_message_lists_what_the_key_may_use(platform):
    async with websockets.connect(f"{_ws_url(platform)}?api_key={platform.limited_key}") as ws:
        assert (await _recv(ws))["type"] == "auth.ok"
        await ws.send(json.dumps({"type": "models"}))
        models = await _recv(ws)
    assert models == {
        "type": "models",
        "data": [{"id": platform.chat_model, "max_model_len": 2048, "kind": "generation"}],
    }


CHAT = {"model": "no-such-model", "messages": [{"role": "user", "content": "Hi"}]}


@pytest.fixture
def key_for(make_tenant, make_key):
    """``await key_for(scopes)``: (ApiKey, secret) of a fresh tenant."""

    def make(scopes):
        return make_key(make_tenant(), scopes=scopes)

    return sync_to_async(make)


# What an in-process exchange may take: channels' 1 s default was missed under CI's load (the
# first connect of a worker process imports and opens what the consumer needs). The tests
# that bound a time (revocation within the recheck interval) keep their own.
WAIT_S = 30


async def _connect(secret: str) -> WebsocketCommunicator:
    headers = [(b"authorization", f"Bearer {secret}".encode())]
    communicator = WebsocketCommunicator(GenerationConsumer.as_asgi(), "/v1/ws", headers=headers)
    connected, _ = await communicator.connect(timeout=WAIT_S)
    assert connected
    return communicator


@pytest.mark.django_db(transaction=True)
async def test_each_message_needs_the_scope_it_needs_over_http(key_for):
    _, secret = await key_for(["websocket", "models"])
    ws = await _connect(secret)
    assert (await ws.receive_json_from(timeout=WAIT_S))["type"] == "auth.ok"
    await ws.send_json_to({"type": "chat.completions", "id": "a", "body": CHAT})
    refused = await ws.receive_json_from(timeout=WAIT_S)
    assert (refused["id"], refused["status"]) == ("a", 403)
    assert refused["error"]["code"] == "insufficient_scope"
    await ws.send_json_to({"type": "models"})
    assert (await ws.receive_json_from(timeout=WAIT_S))[
        "type"
    ] == "models"  # the socket stays usable
    await ws.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_chat_key_chats_over_the_socket(key_for):
    _, secret = await key_for(["websocket", "chat.completions"])
    ws = await _connect(secret)
    assert (await ws.receive_json_from(timeout=WAIT_S))["type"] == "auth.ok"
    await ws.send_json_to({"type": "chat.completions", "id": "a", "body": CHAT})
    past_the_scope = await ws.receive_json_from(
        timeout=WAIT_S
    )  # refused only for the unknown model
    assert past_the_scope["error"]["code"] == "model_not_found"
    await ws.send_json_to({"type": "models"})
    assert (await ws.receive_json_from(timeout=WAIT_S))["error"]["code"] == "insufficient_scope"
    await ws.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_frames_of_the_wrong_shape_get_errors_and_the_socket_stays_open(key_for):
    _, secret = await key_for(["websocket", "models"])
    ws = await _connect(secret)
    assert (await ws.receive_json_from(timeout=WAIT_S))["type"] == "auth.ok"
    # A list or object where a string belongs: each answered, none ends the connection.
    for frame in ({"type": []}, {"type": {"a": 1}, "id": ["x"]}, {"type": "cancel", "id": {}}):
        await ws.send_json_to(frame)
        error = await ws.receive_json_from(timeout=WAIT_S)
        assert (error["type"], error["id"], error["status"]) == ("error", None, 400)
    await ws.send_json_to({"type": "auth", "api_key": ["sk-x"]})
    refused = await ws.receive_json_from(timeout=WAIT_S)
    assert refused["status"] == 401 and '"api_key": "sk-..."' in refused["error"]["message"]
    await ws.send_json_to({"type": "auth", "api_key": secret})
    assert (await ws.receive_json_from(timeout=WAIT_S))["type"] == "auth.ok"
    await ws.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_scoped_key_needs_the_websocket_scope_to_connect(key_for):
    _, secret = await key_for(["chat.completions"])
    ws = await _connect(secret)
    refused = await ws.receive_json_from(timeout=WAIT_S)
    assert (refused["id"], refused["status"]) == (None, 403)
    assert refused["error"]["code"] == "insufficient_scope"
    await ws.disconnect()


async def _assert_session_ended(ws: WebsocketCommunicator) -> None:
    error = await ws.receive_json_from(timeout=2)
    assert (error["type"], error["id"], error["status"]) == ("error", None, 401)
    assert error["error"]["code"] == "invalid_api_key"
    assert set(error["error"]) == {"message", "type", "param", "code"}
    closed = await ws.receive_output(timeout=1)
    assert closed == {"type": "websocket.close", "code": CLOSE_CREDENTIAL_REFUSED}


@pytest.mark.django_db(transaction=True)
async def test_revocation_closes_an_idle_socket_within_the_recheck_interval(key_for):
    key, secret = await key_for([])
    ws = await _connect(secret)
    assert (await ws.receive_json_from(timeout=WAIT_S))["type"] == "auth.ok"
    await sync_to_async(api_key_revoke)(key=key)
    await _assert_session_ended(ws)


@pytest.mark.django_db(transaction=True)
async def test_a_new_generation_checks_the_key_again(key_for, settings):
    settings.WEBSOCKET_AUTH_RECHECK_SECONDS = 600  # only the per-message check can notice
    key, secret = await key_for([])
    ws = await _connect(secret)
    assert (await ws.receive_json_from(timeout=WAIT_S))["type"] == "auth.ok"
    await sync_to_async(api_key_revoke)(key=key)  # this process's cache is dropped at once
    await ws.send_json_to({"type": "chat.completions", "id": "a", "body": CHAT})
    await _assert_session_ended(ws)


@pytest.mark.django_db(transaction=True)
async def test_a_database_outage_during_rechecks_is_two_log_lines(
    key_for, settings, monkeypatch, caplog
):
    """Rechecks that fail while the database is away keep the socket serving and log the
    outage once when it starts and once when it ends: not a traceback per interval."""
    from django.db import OperationalError

    from inference import credentials

    settings.WEBSOCKET_AUTH_RECHECK_SECONDS = 0.02
    _, secret = await key_for(["websocket", "models"])
    ws = await _connect(secret)
    assert (await ws.receive_json_from(timeout=WAIT_S))["type"] == "auth.ok"
    recheck, failures = credentials.Credential.recheck, []

    async def database_away(self, *, endpoint=None):
        if endpoint is None:  # the periodic check; a message's own check still answers
            failures.append(endpoint)
            raise OperationalError("connection to server failed\nIs the server running?")
        return await recheck(self, endpoint=endpoint)

    with caplog.at_level(logging.DEBUG, logger="inference.consumers"):
        monkeypatch.setattr(credentials.Credential, "recheck", database_away)
        while len(failures) < 5:
            await asyncio.sleep(0.02)
        await ws.send_json_to({"type": "models"})
        assert (await ws.receive_json_from(timeout=WAIT_S))["type"] == "models"
        monkeypatch.setattr(credentials.Credential, "recheck", recheck)
        for _ in range(250):
            if any("answers again" in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0.02)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and warnings[0].exc_info is None
    assert "OperationalError: connection to server failed" in warnings[0].getMessage()
    (back,) = [r for r in caplog.records if "answers again" in r.getMessage()]
    assert "the database or Redis answers again" in back.getMessage()
    await ws.disconnect()
