"""Server-sent events framing: ``data: <json>\\n\\n`` per chunk and ``data: [DONE]`` at the end
(OpenAI's chunks), or typed events, ``event: <type>`` before each (the Responses and Messages
APIs)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec

DONE = b"data: [DONE]\n\n"

# One event per token per stream: msgspec writes compact UTF-8 JSON about ten times faster
# than json.dumps (measured in docs/benchmarks.md, "CPU online"), and a non-finite float (a
# -inf logprob) becomes null instead of json.dumps' -Infinity, which is not JSON.
_encode = msgspec.json.Encoder().encode


def sse_event(payload: dict) -> bytes:
    return b"data: " + _encode(payload) + b"\n\n"


async def sse_stream(chunks: AsyncIterator[dict], *, on_error) -> AsyncIterator[bytes]:
    """Frame ``chunks``; an error mid-stream becomes an error event, and ``[DONE]`` ends it.

    ``on_error(exc)`` turns the exception into an OpenAI error body (the HTTP status is already
    sent, so the error travels inside the stream as OpenAI and vLLM do).
    """
    try:
        async for chunk in chunks:
            yield sse_event(chunk)
    except Exception as exc:
        yield sse_event(on_error(exc))
    yield DONE


class SseBody:
    """A streaming response body: ``chunks`` framed as SSE. Django calls ``close`` when the
    response ends, also when it never sent the body; that closes ``chunks`` too."""

    def __init__(self, chunks: AsyncIterator[dict], *, on_error):
        self._chunks = chunks
        self._on_error = on_error

    def __aiter__(self) -> AsyncIterator[bytes]:
        return sse_stream(self._chunks, on_error=self._on_error)

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()


def typed_event(event: dict) -> bytes:
    """``event: <its type>`` and ``data: <event>``."""
    return b"event: " + event["type"].encode() + b"\ndata: " + _encode(event) + b"\n\n"


class TypedEventsBody(SseBody):
    """Typed SSE, without ``[DONE]`` (as OpenAI's Responses API and Anthropic's Messages API);
    an error mid-stream is one more event, what ``on_error(exc)`` makes of it."""

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._frames()

    async def _frames(self) -> AsyncIterator[bytes]:
        try:
            async for event in self._chunks:
                yield typed_event(event)
        except Exception as exc:
            yield typed_event(self._on_error(exc))
