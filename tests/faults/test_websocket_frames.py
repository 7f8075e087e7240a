"""Hostile WebSocket frames get an error frame, and the connection goes on (issue 15.7).

A frame nested 100,000 levels deep used to kill the consumer inside Channels' JSON decoding
(RecursionError, close 1011); binary and empty frames did the same. Each now gets the HTTP
parser's 400 as an error frame on the same, still open, connection.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets

pytestmark = [pytest.mark.faults, pytest.mark.slow]

DEEP = 100_000


async def _recv(ws, timeout: float = 30) -> dict:
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


def _deep_frame() -> str:
    nested = "[" * DEEP + "]" * DEEP
    body = '{"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], '
    return '{"type": "chat.completions", "id": "deep", "body": ' + body + '"x": ' + nested + "}}"


FRAMES = {
    "a body nested 100,000 deep": (_deep_frame(), "nested deeper than"),
    "an array nested 100,000 deep": ("[" * DEEP + "]" * DEEP, "nested deeper than"),
    "NaN": ('{"type": "models", "x": NaN}', "parse"),
    "not JSON": ("{", "parse"),
    "a binary frame": (b'{"type": "models"}', "text frame"),
    "an empty frame": ("", "text frame"),
}


@pytest.mark.parametrize("name", list(FRAMES))
async def test_bad_frame_gets_a_400_frame_and_the_connection_stays(api_platform, name):
    frame, message = FRAMES[name]
    url = api_platform.base_url.replace("http://", "ws://") + "/v1/ws"
    async with websockets.connect(f"{url}?api_key={api_platform.api_key}", max_size=None) as ws:
        assert (await _recv(ws))["type"] == "auth.ok"
        for _ in range(3):  # again and again: no crash, no disconnect
            await ws.send(frame)
            error = await _recv(ws)
            assert error["type"] == "error" and error["status"] == 400, error
            assert error["error"]["type"] == "invalid_request_error"
            assert message in error["error"]["message"]
        await ws.send(json.dumps({"type": "models"}))
        assert (await _recv(ws))["type"] == "models"
