"""The WebSocket under faults, against a real Daphne and engine.

Hostile frames get an error frame, and the connection goes on (issue 15.7): a frame nested
100,000 levels deep used to kill the consumer inside Channels' JSON decoding (RecursionError,
close 1011); binary and empty frames did the same. Each now gets the HTTP parser's 400 as an
error frame on the same, still open, connection.

A revoked key (or a staff user who lost the playground) ends its open WebSockets. Before: a key
revoked with manage.py kept generating on an open socket 62 s later. Now the socket gets an
error frame (OpenAI body, code invalid_api_key) and a close within about 1 s of the revocation
(CLOSE_BOUND_S allows a loaded runner 3), and what it was generating is aborted in the engine.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import websockets

from controlplane.launcher.process_commands import manage_command
from controlplane.tenants.key_secrets import prefix_of
from inference.consumers import CLOSE_CREDENTIAL_REFUSED
from tests.support.operator_commands import admin_sign_in, create_key, manage
from tests.support.processes import REPO

pytestmark = [pytest.mark.faults, pytest.mark.slow]

USER = [{"role": "user", "content": "Tell me about dicts."}]

# The server closes a socket whose credential no longer stands within about 1 s: a 0.5 s recheck
# and a 0.5 s epoch read (docs/websocket.md). The bound leaves room for a loaded CI runner, where
# the server's recheck and this client (which reads every chunk streamed before the close) wait
# for cores: 2.0 and 2.2 s were measured with three test workers beside two busy loops on 2 cores
# (2026-11-27). A revocation that did not reach open sockets would take the key cache's 60 s.
CLOSE_BOUND_S = 3.0


def _ws_url(platform) -> str:
    return platform.base_url.replace("http://", "ws://") + "/v1/ws"


async def _recv(ws, timeout: float = 30) -> dict:
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


DEEP = 100_000


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


async def _until_session_ends(ws, *, since: float) -> tuple[dict, float]:
    """Skip the chunks still in flight; the error frame, and seconds from ``since`` to the
    close that must follow it."""
    while True:
        message = await _recv(ws, timeout=5)
        if message["type"] != "chunk":
            break
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await asyncio.wait_for(ws.recv(), 5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == CLOSE_CREDENTIAL_REFUSED
    return message, time.monotonic() - since


def _assert_refused(error: dict) -> None:
    assert (error["type"], error["id"], error["status"]) == ("error", None, 401)
    assert error["error"]["code"] == "invalid_api_key"
    assert set(error["error"]) == {"message", "type", "param", "code"}


async def _revoke(platform, secret: str) -> float:
    """``manage.py revoke_api_key`` as an operator runs it: when it said the key was revoked
    (it says so after the transaction committed)."""
    process = await asyncio.create_subprocess_exec(
        *manage_command("revoke_api_key", prefix_of(secret)),
        cwd=REPO,
        env=platform.env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    line = await asyncio.wait_for(process.stdout.readline(), 60)
    revoked_at = time.monotonic()
    assert line.startswith(b"revoked key"), line
    assert await process.wait() == 0
    return revoked_at


async def test_revoking_a_key_ends_its_socket_and_aborts_its_generation(platform):
    platform.wait_engine_idle()
    secret = await asyncio.to_thread(create_key, platform.env)
    headers = {"Authorization": f"Bearer {secret}"}
    body = {
        "model": platform.chat_model,
        "messages": USER,
        "max_tokens": 1800,
        "temperature": 0,
        "ignore_eos": True,
    }
    async with websockets.connect(_ws_url(platform), additional_headers=headers) as ws:
        assert (await _recv(ws))["type"] == "auth.ok"
        await ws.send(json.dumps({"type": "chat.completions", "id": "long-0", "body": body}))
        for _ in range(3):
            assert (await _recv(ws))["type"] == "chunk"
        revoking = asyncio.create_task(_revoke(platform, secret))
        # Until the revocation, a new generation follows each that finishes: on the CPU
        # kernels 1800 tokens can end before manage.py has even started, and the point is a
        # generation in flight when the key stops standing.
        error, started = None, 1
        while error is None:
            message = await _recv(ws)
            if message["type"] == "error":
                error = message
            elif message["type"] == "done" and not revoking.done():
                request = {"type": "chat.completions", "id": f"long-{started}", "body": body}
                await ws.send(json.dumps(request))
                started += 1
        revoked_at = await revoking
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 5)
        seconds = time.monotonic() - revoked_at
    assert closed.value.rcvd is not None and closed.value.rcvd.code == CLOSE_CREDENTIAL_REFUSED
    _assert_refused(error)
    assert error["error"]["message"] == "This API key has been revoked."
    assert seconds < CLOSE_BOUND_S, f"closed {seconds:.2f} s after the revocation"
    totals = await asyncio.to_thread(platform.wait_engine_idle, 10)  # aborted, not finishing
    assert totals["num_running"] == 0

    async with websockets.connect(_ws_url(platform), additional_headers=headers) as ws:
        assert (await _recv(ws))["error"]["message"] == "This API key has been revoked."


_STAFF_USER = """
from django.contrib.auth.models import Permission, User
user = User.objects.create_user({username!r}, password={password!r}, is_staff=True)
user.user_permissions.add(Permission.objects.get(codename="use_playground"))
"""


def _staff_session(platform, username: str, password: str) -> str:
    """A staff user who may use the playground, signed in through the real admin login."""
    script = _STAFF_USER.format(username=username, password=password)
    manage(platform.env, "shell", "-c", script)
    response = admin_sign_in(platform.base_url, username, password)
    assert response.status_code == 302, response.text[:2000]
    return response.cookies["sessionid"]


@pytest.mark.parametrize("change", ["is_active", "is_staff"])
async def test_a_staff_socket_ends_when_the_user_loses_staff_rights(platform, change):
    username = f"ops-{change.replace('_', '-')}"
    session = await asyncio.to_thread(_staff_session, platform, username, "pw-fault-123")
    headers = {"Cookie": f"sessionid={session}"}
    async with websockets.connect(_ws_url(platform), additional_headers=headers) as ws:
        assert (await _recv(ws))["type"] == "auth.ok"
        await ws.send(json.dumps({"type": "models"}))
        assert (await _recv(ws))["type"] == "models"
        users = "from django.contrib.auth.models import User; User.objects"
        script = f"{users}.filter(username={username!r}).update({change}=False)"
        await asyncio.to_thread(manage, platform.env, "shell", "-c", script)
        error, seconds = await _until_session_ends(ws, since=time.monotonic())
    _assert_refused(error)
    assert seconds < CLOSE_BOUND_S, f"closed {seconds:.2f} s after the change"
