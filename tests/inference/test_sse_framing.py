"""SSE framing of one event: what a streaming client parses, byte for byte."""

from __future__ import annotations

import json

from inference.sse import DONE, sse_event, sse_stream


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
