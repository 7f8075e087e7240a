"""The body-size middleware at the ASGI level: what it reads, what it answers, what it lets by;
/v1/files takes uploads up to FILES_MAX_UPLOAD_BYTES, far over the JSON API's body cap.

tests/faults/test_request_limits.py sends real oversize bodies to a real Daphne.
"""

from __future__ import annotations

import json

from inference.body_limit import BodySizeLimit, is_api_path

LIMIT = 100


class Recorder:
    """An ASGI app standing in for Django: reads the whole body as Django does, answers 200."""

    def __init__(self):
        self.called = False
        self.body = b""
        self.saw_disconnect = False

    async def __call__(self, scope, receive, send):
        self.called = True
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":  # Django: RequestAborted, no response
                self.saw_disconnect = True
                return
            self.body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def _scope(path: str = "/v1/chat/completions", length: int | None = None) -> dict:
    headers = [(b"content-type", b"application/json")]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    return {"type": "http", "method": "POST", "path": path, "headers": headers}


async def _run(scope, chunks: list[bytes]):
    """Run the middleware over ``chunks``; (the app, messages sent, chunks left unread)."""
    app = Recorder()
    pending = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]
    sent = []

    async def receive():
        return pending.pop(0)

    async def send(message):
        sent.append(message)

    await BodySizeLimit(app, max_bytes=LIMIT)(scope, receive, send)
    return app, sent, len(pending)


def _status_and_error(sent) -> tuple[int, dict]:
    body = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    return sent[0]["status"], body["error"]


async def test_a_declared_length_over_the_limit_is_refused_before_reading():
    app, sent, unread = await _run(_scope(length=LIMIT + 1), [b"x" * (LIMIT + 1)])
    assert not app.called and unread == 1
    status, error = _status_and_error(sent)
    assert status == 413
    assert error["code"] == "request_too_large" and error["type"] == "invalid_request_error"
    assert str(LIMIT) in error["message"]
    assert (b"content-type", b"application/json") in sent[0]["headers"]
    assert (b"connection", b"close") in sent[0]["headers"]


async def test_a_chunked_body_is_cut_off_once_past_the_limit():
    chunks = [b"x" * 40] * 10  # no Content-Length: 400 bytes in 40-byte pieces
    app, sent, unread = await _run(_scope(), chunks)
    # The app was told the client left after the third piece; the rest were never read.
    assert app.saw_disconnect and unread == 7
    assert _status_and_error(sent)[0] == 413


async def test_bodies_within_the_limit_reach_the_app_whole():
    app, sent, _ = await _run(_scope(length=LIMIT), [b"x" * 60, b"x" * 40])
    assert app.body == b"x" * LIMIT
    assert sent[0]["status"] == 200


async def test_paths_outside_the_json_api_are_not_limited():
    big = [b"x" * (LIMIT * 10)]
    for path in ("/admin/adapters/adapter/add/", "/dashboard/", "/health"):
        app, sent, _ = await _run(_scope(path, length=LIMIT * 10), big)
        assert app.body == big[0] and sent[0]["status"] == 200, path


def test_the_json_api_paths():
    assert all(
        map(is_api_path, ["/v1", "/v1/completions", "/v2/rerank", "/tokenize", "/detokenize"])
    )
    assert not any(map(is_api_path, ["/v1x", "/tokenizer", "/admin/", "/health", "/"]))


async def test_the_limit_defaults_to_the_setting(settings):
    settings.API_MAX_REQUEST_BYTES = 10
    app = Recorder()
    sent = []

    async def receive():  # pragma: no cover - never called: the length decides
        raise AssertionError("read")

    async def send(message):
        sent.append(message)

    await BodySizeLimit(app)(_scope(length=11), receive, send)
    assert sent[0]["status"] == 413


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
