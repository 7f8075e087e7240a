"""/v1/files takes uploads up to FILES_MAX_UPLOAD_BYTES, far over the JSON API's body cap, and
refuses bigger ones with a 413 before reading them; other API paths keep their own cap."""

from __future__ import annotations

from inference.body_limit import BodySizeLimit


async def _status(path: str, length: int) -> int:
    answered = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive():
        return {"type": "http.request", "body": b"x" * length, "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start":
            answered.append(message["status"])

    headers = [(b"content-length", str(length).encode())]
    scope = {"type": "http", "method": "POST", "path": path, "headers": headers}
    await BodySizeLimit(app)(scope, receive, send)
    return answered[0]


async def test_file_uploads_have_their_own_larger_cap(settings):
    settings.API_MAX_REQUEST_BYTES = 1000
    settings.FILES_MAX_UPLOAD_BYTES = 200_000
    assert await _status("/v1/files", 150_000) == 200
    assert await _status("/v1/chat/completions", 150_000) == 413
    assert await _status("/v1/batches", 150_000) == 413
    assert await _status("/v1/files", 400_000) == 413
