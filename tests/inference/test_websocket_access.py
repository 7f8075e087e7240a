"""WebSocket access, in process: scopes mean what they mean over HTTP, and a revoked key's
socket is closed (its generations aborted) with an error frame.

The same faults against a real Daphne and engine are in tests/faults/.
"""
# ruff: noqa: F811  (the fixtures imported from tests.support.tenant_fixtures are parameters here)

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from controlplane.tenants.services import api_key_revoke
from inference.consumers import CLOSE_CREDENTIAL_REFUSED, GenerationConsumer
from tests.support.tenant_fixtures import _fresh_key_cache, make_key, make_tenant  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = {"model": "no-such-model", "messages": [{"role": "user", "content": "Hi"}]}


@pytest.fixture
def key_for(make_tenant, make_key):
    """``await key_for(scopes)``: (ApiKey, secret) of a fresh tenant."""

    def make(scopes):
        return make_key(make_tenant(), scopes=scopes)

    return sync_to_async(make)


async def _connect(secret: str) -> WebsocketCommunicator:
    headers = [(b"authorization", f"Bearer {secret}".encode())]
    communicator = WebsocketCommunicator(GenerationConsumer.as_asgi(), "/v1/ws", headers=headers)
    connected, _ = await communicator.connect()
    assert connected
    return communicator


async def test_each_message_needs_the_scope_it_needs_over_http(key_for):
    _, secret = await key_for(["websocket", "models"])
    ws = await _connect(secret)
    assert (await ws.receive_json_from())["type"] == "auth.ok"
    await ws.send_json_to({"type": "chat.completions", "id": "a", "body": CHAT})
    refused = await ws.receive_json_from()
    assert (refused["id"], refused["status"]) == ("a", 403)
    assert refused["error"]["code"] == "insufficient_scope"
    await ws.send_json_to({"type": "models"})
    assert (await ws.receive_json_from())["type"] == "models"  # the socket stays usable
    await ws.disconnect()


async def test_a_chat_key_chats_over_the_socket(key_for):
    _, secret = await key_for(["websocket", "chat.completions"])
    ws = await _connect(secret)
    assert (await ws.receive_json_from())["type"] == "auth.ok"
    await ws.send_json_to({"type": "chat.completions", "id": "a", "body": CHAT})
    past_the_scope = await ws.receive_json_from()  # refused only for the unknown model
    assert past_the_scope["error"]["code"] == "model_not_found"
    await ws.send_json_to({"type": "models"})
    assert (await ws.receive_json_from())["error"]["code"] == "insufficient_scope"
    await ws.disconnect()


async def test_a_scoped_key_needs_the_websocket_scope_to_connect(key_for):
    _, secret = await key_for(["chat.completions"])
    ws = await _connect(secret)
    refused = await ws.receive_json_from()
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


async def test_revocation_closes_an_idle_socket_within_the_recheck_interval(key_for):
    key, secret = await key_for([])
    ws = await _connect(secret)
    assert (await ws.receive_json_from())["type"] == "auth.ok"
    await sync_to_async(api_key_revoke)(key=key)
    await _assert_session_ended(ws)


async def test_a_new_generation_checks_the_key_again(key_for, settings):
    settings.WEBSOCKET_AUTH_RECHECK_SECONDS = 600  # only the per-message check can notice
    key, secret = await key_for([])
    ws = await _connect(secret)
    assert (await ws.receive_json_from())["type"] == "auth.ok"
    await sync_to_async(api_key_revoke)(key=key)  # this process's cache is dropped at once
    await ws.send_json_to({"type": "chat.completions", "id": "a", "body": CHAT})
    await _assert_session_ended(ws)
