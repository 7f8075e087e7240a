"""The multiplexing WebSocket (/v1/ws): several generations on one connection, cancel by id."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets

pytestmark = pytest.mark.slow

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


async def test_authorization_header_at_connect(platform):
    headers = {"Authorization": f"Bearer {platform.api_key}"}
    async with websockets.connect(_ws_url(platform), additional_headers=headers) as ws:
        assert (await _recv(ws))["type"] == "auth.ok"


async def test_models_message_lists_what_the_key_may_use(platform):
    async with websockets.connect(f"{_ws_url(platform)}?api_key={platform.limited_key}") as ws:
        assert (await _recv(ws))["type"] == "auth.ok"
        await ws.send(json.dumps({"type": "models"}))
        models = await _recv(ws)
    assert models == {
        "type": "models",
        "data": [{"id": platform.chat_model, "max_model_len": 2048, "kind": "generation"}],
    }
