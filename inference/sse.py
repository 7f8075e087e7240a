"""Server-sent events framing: ``data: <json>\\n\\n`` per chunk and ``data: [DONE]`` at the end."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

DONE = b"data: [DONE]\n\n"


def sse_event(payload: dict) -> bytes:
    return (
        b"data: "
        + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        + b"\n\n"
    )


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
