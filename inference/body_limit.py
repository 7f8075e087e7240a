"""ASGI middleware: JSON API bodies over ``API_MAX_REQUEST_BYTES`` get a 413, unread.

Django reads a whole body before the view runs, and the view parses, validates and tokenizes
it on the event loop; one huge body stalled every other request of the process. This refuses
a body whose Content-Length is over the cap before reading any of it, and stops reading a
chunked body as soon as it passes the cap (Django is told the client left, so it never builds
the request). Only the JSON API's paths are limited: the admin's adapter upload streams large
multipart files to disk under its own limit (``ADAPTER_MAX_BYTES``), and /v1/files under
``FILES_MAX_UPLOAD_BYTES`` (its uploads stream to a temporary file too).

Daphne itself receives a whole body before any application runs; for a Content-Length over the
cap it keeps none of it (``capped_limit_for`` is handed to controlplane/common/daphne_bodies.py).
To refuse an upload before it is sent, a proxy in front needs a limit too (docs/operations.md).
"""

from __future__ import annotations

import json

from django.conf import settings

from controlplane.common.api_error import ApiError


def is_api_path(path: str) -> bool:
    """The paths of the JSON API (inference/urls.py), the ones this limit applies to."""
    return path in ("/v1", "/tokenize", "/detokenize", "/v2/rerank") or path.startswith("/v1/")


# The multipart framing around an uploaded file (boundaries, the purpose field, headers).
UPLOAD_FRAMING_BYTES = 64 * 1024


def limit_for(path: str) -> int:
    """The cap for ``path``: file uploads (/v1/files) stream to disk and take files up to
    ``FILES_MAX_UPLOAD_BYTES``, as does a message batch (its requests are a batch's file);
    every other API body ``API_MAX_REQUEST_BYTES``."""
    if path == "/v1/files":
        return settings.FILES_MAX_UPLOAD_BYTES + UPLOAD_FRAMING_BYTES
    if path == "/v1/messages/batches":  # a whole batch's requests in one JSON body
        return settings.FILES_MAX_UPLOAD_BYTES
    return settings.API_MAX_REQUEST_BYTES


def capped_limit_for(path: str) -> int | None:
    """The cap for ``path`` when it is an API path, else None (not capped here)."""
    return limit_for(path) if is_api_path(path) else None


def _declared_length(scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def too_large_error(limit: int) -> ApiError:
    return ApiError(
        f"The request body is larger than this server accepts ({limit} bytes); send fewer or "
        "shorter prompts.",
        status=413,
        code="request_too_large",
    )


class BodySizeLimit:
    """Wraps the HTTP application; ``max_bytes`` defaults to ``settings.API_MAX_REQUEST_BYTES``."""

    def __init__(self, app, *, max_bytes: int | None = None):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not is_api_path(scope.get("path", "")):
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        limit = self.max_bytes if self.max_bytes is not None else limit_for(path)
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            return await _send_error(send, too_large_error(limit))
        received = 0
        over = False

        async def limited_receive():
            nonlocal received, over
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    # Django drops a request whose client left while it read the body.
                    over = True
                    return {"type": "http.disconnect"}
            return message

        await self.app(scope, limited_receive, send)
        if over:
            await _send_error(send, too_large_error(limit))


async def _send_error(send, error: ApiError) -> None:
    body = json.dumps(error.body()).encode()
    # Connection: close, as for any refused upload: the client may still be sending the rest,
    # and the server frees what it buffered of the body with the connection.
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
