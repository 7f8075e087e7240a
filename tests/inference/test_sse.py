"""Server-sent events: the framing of one event, byte for byte, and the bytes of a whole
streamed response as a non-SDK client sees them (slow: the platform); disconnect = abort."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from inference.sse import DONE, sse_event, sse_stream
from tests.support.api_platform import counter_growth

USER = [{"role": "user", "content": "Count for me."}]


def _strict_json(data: bytes):
    """json.loads that refuses NaN/Infinity, as JSON parsers outside Python do."""

    def refuse(constant: str):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(data, parse_constant=refuse)


def test_event_is_one_compact_utf8_json_line():
    payload = {"id": "cmpl-1", "choices": [{"index": 0, "text": "héllo 世界\n", "logprobs": None}]}
    event = sse_event(payload)
    assert event.startswith(b"data: ") and event.endswith(b"\n\n")
    body = event[len(b"data: ") : -2]
    assert b"\n" not in body  # a raw newline would end the event early
    assert "héllo 世界".encode() in body  # UTF-8 as is, not \\u escapes
    assert b", " not in body and b": " not in body  # compact separators
    assert _strict_json(body) == payload


def test_non_finite_logprob_still_parses_as_json():
    # A -inf logprob (a token the sampler ruled out) must not break the client's parser.
    event = sse_event({"logprob": float("-inf"), "top": [float("nan"), -0.25]})
    assert _strict_json(event[len(b"data: ") : -2]) == {"logprob": None, "top": [None, -0.25]}


async def test_stream_ends_with_done_after_an_error_event():
    async def chunks():
        yield {"n": 1}
        raise RuntimeError("engine died")

    events = [e async for e in sse_stream(chunks(), on_error=lambda exc: {"error": str(exc)})]
    assert events == [b'data: {"n":1}\n\n', b'data: {"error":"engine died"}\n\n', DONE]


def _events(raw: bytes) -> list[bytes]:
    assert raw.endswith(b"\n\n")
    return raw[:-2].split(b"\n\n")


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2])
def test_chat_stream_bytes(platform, n):
    body = {
        "model": platform.chat_model,
        "messages": USER,
        "max_tokens": 6,
        "temperature": 0,
        "n": n,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream(
        "POST",
        f"{platform.base_url}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {platform.api_key}"},
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = response.read()
    events = _events(raw)
    assert all(e.startswith(b"data: ") for e in events)
    assert events[-1] == b"data: [DONE]"
    chunks = [json.loads(e[len(b"data: ") :]) for e in events[:-1]]
    for index in range(n):
        mine = [
            c["choices"][0] for c in chunks if c["choices"] and c["choices"][0]["index"] == index
        ]
        # The role comes first, on its own, then content, then exactly one finish_reason.
        assert mine[0]["delta"] == {"role": "assistant", "content": ""}
        assert all("role" not in c["delta"] for c in mine[1:])
        finishes = [c["finish_reason"] for c in mine if c["finish_reason"] is not None]
        assert finishes == ["length"]
        assert mine[-1]["finish_reason"] == "length"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    # With include_usage every chunk carries "usage": null, and the last one has the totals
    # and no choices.
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 6 * n
    assert chunks[-1]["usage"]["total_tokens"] == chunks[-1]["usage"]["prompt_tokens"] + 6 * n


@pytest.mark.slow
def test_completion_stream_without_usage(platform):
    body = {"model": platform.chat_model, "prompt": "The", "max_tokens": 4, "stream": True}
    raw = httpx.post(
        f"{platform.base_url}/v1/completions",
        json=body,
        headers={"Authorization": f"Bearer {platform.api_key}"},
    ).content
    events = _events(raw)
    assert events[-1] == b"data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert all("usage" not in c and c["object"] == "text_completion" for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in chunks].count("length") == 1


@pytest.mark.slow
def test_closing_the_connection_aborts_the_request(platform):
    """A client that goes away mid-stream frees its slot in the engine within moments."""
    before = platform.wait_engine_idle()
    max_tokens = 1800
    payload = json.dumps(
        {
            "model": platform.chat_model,
            "messages": USER,
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
            "n": 2,
            "ignore_eos": True,
        }
    ).encode()
    host, port = platform.base_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {platform.api_key}\r\n".encode()
        + f"Content-Length: {len(payload)}\r\n\r\n".encode()
        + payload
    )
    received = b""
    while received.count(b"data: ") < 5:
        received += sock.recv(65536)
    assert b" 200 OK" in received.split(b"\r\n", 1)[0]  # and it is generating
    # Closed at once: on a fast CPU the tiny model makes the 3,600 tokens in about a second,
    # so waiting for the engine's status to show the request running (published once per
    # heartbeat) let it finish first (2026-11-26, a 2-core AMD EPYC).
    sock.close()
    after = platform.wait_engine_idle(timeout=20)
    generated = counter_growth(before, after, "generation_tokens_total")
    # Aborted: the engine stopped before the 2 x max_tokens the request asked for (how many
    # tokens a tiny model makes before Daphne notices the closed socket depends on the load).
    assert 0 < generated < 2 * max_tokens
