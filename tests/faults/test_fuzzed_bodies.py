"""Every field of a valid request, replaced in turn by a value of the wrong shape, against a real
Daphne and engine: never a 5xx, always the error body of the endpoint's API (OpenAI's, or
Anthropic's for /v1/messages), and the platform serves as before afterwards.

A fuzz of the served API (random mutations of every field, about 10,000 requests) found
500s this grid now covers: a list as a content block's ``type`` (a dict lookup of an
unhashable value), a lone UTF-16 surrogate in fields no text check looked at, and batch
bodies that could not be written back out. The grid is the same on every run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytestmark = [pytest.mark.faults, pytest.mark.slow]

MODEL = "tiny-llama"
# json.dumps writes this marker; the body then gets a lone surrogate's escape in its place.
_LONE = "LONE-SURROGATE-MARKER"
ODD_VALUES: list[Any] = [None, [], {}, 2**64, -1, "", _LONE, [{"type": []}], {"type": {}}]

BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {
        "model": MODEL,
        "max_tokens": 2,
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": "hi", "name": "u"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "4"},
        ],
        "tools": [
            {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
        ],
        "response_format": {"type": "json_object"},
        "stop": ["x"],
        "logprobs": True,
        "top_logprobs": 2,
        "metadata": {"k": "v"},
        "user": "end-user-1",
    },
    "/v1/completions": {"model": MODEL, "prompt": ["Once", "Twice"], "max_tokens": 2, "echo": True},
    "/v1/responses": {
        "model": MODEL,
        "max_output_tokens": 16,
        "store": False,
        "instructions": "Be brief.",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "4"},
        ],
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "metadata": {"k": "v"},
    },
    "/v1/messages": {
        "model": MODEL,
        "max_tokens": 2,
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "4"}],
                    }
                ],
            },
        ],
        "tools": [{"name": "f", "input_schema": {"type": "object"}}],
        "metadata": {"user_id": "u"},
    },
    "/v1/messages/count_tokens": {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
    "/v1/responses/input_tokens": {"model": MODEL, "input": "hi"},
    "/v1/conversations": {"items": [{"type": "message", "role": "user", "content": "hi"}]},
    "/tokenize": {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
}


def _paths(value: Any, path: tuple = ()) -> Iterator[tuple]:
    """Every field's path in ``value``, the fields inside lists and objects included."""
    if path:
        yield path
    if isinstance(value, dict | list):
        for key, child in value.items() if isinstance(value, dict) else enumerate(value):
            yield from _paths(child, (*path, key))


def _replaced(body: dict, path: tuple, odd: Any) -> bytes:
    copy = json.loads(json.dumps(body))
    parent = copy
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = odd
    return json.dumps(copy).replace(f'"{_LONE}"', '"\\ud800"').encode()


def _is_error_body(path: str, body: Any) -> bool:
    if path.startswith("/v1/messages"):
        error = body.get("error") if body.get("type") == "error" else None
        return isinstance(error, dict) and bool(error.get("message")) and "type" in error
    error = body.get("error")
    return isinstance(error, dict) and set(error) >= {"message", "type", "param", "code"}


def test_no_field_of_the_wrong_shape_is_a_server_error(platform):
    headers = {"Authorization": f"Bearer {platform.api_key}", "Content-Type": "application/json"}
    unexpected = []
    with httpx.Client(base_url=platform.base_url, headers=headers, timeout=120) as client:
        for endpoint, body in BODIES.items():
            assert client.post(endpoint, content=json.dumps(body)).status_code == 200, endpoint
            for path in _paths(body):
                for odd in ODD_VALUES:
                    response = client.post(endpoint, content=_replaced(body, path, odd))
                    if response.status_code == 200:
                        continue
                    shown = response.json() if response.content.startswith(b"{") else {}
                    if response.status_code >= 500 or not _is_error_body(endpoint, shown):
                        unexpected.append((endpoint, path, repr(odd), response.status_code))
        assert unexpected == []
        chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        assert client.post("/v1/chat/completions", json=chat).status_code == 200
