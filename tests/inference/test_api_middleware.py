"""The JSON API's own middleware under Daphne (controlplane/common/api_middleware.py): an API
request still gets the security headers and counts in django-prometheus's metrics (the Grafana
dashboard reads them), its middleware hooks run on the event loop, and every other path keeps
the browser's full stack (sessions, CSRF, clickjacking)."""

from __future__ import annotations

import asyncio
import gc
import threading

import httpx

from controlplane.common.api_middleware import ApiASGIHandler, InlinePrometheusAfterMiddleware
from tests.inference.metrics.test_metrics_e2e import scrape_url, total

VIEW_REQUESTS = "django_http_requests_total_by_view_transport_method_total"


def api_scope(method: str, path: str) -> dict:
    """An HTTP scope as Daphne hands it to the API handler, without a key."""
    return {
        "type": "http",
        "method": method,
        "path": path,
        "headers": [],
        "query_string": b"",
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 1234),
    }


def test_an_api_response_has_the_security_headers_and_no_browser_ones(api_platform, auth):
    response = httpx.get(f"{api_platform.base_url}/v1/models", headers=auth, timeout=10)
    assert response.status_code == 200
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"
    # Sessions, CSRF and clickjacking belong to pages, not to a JSON API called with a key.
    assert "set-cookie" not in response.headers
    assert "x-frame-options" not in response.headers


def test_api_requests_count_in_the_django_metrics(api_platform, auth):
    before = total(scrape_url(api_platform, api_platform.base_url), VIEW_REQUESTS, view="models")
    for _ in range(3):
        httpx.get(f"{api_platform.base_url}/v1/models", headers=auth, timeout=10)
    after = total(scrape_url(api_platform, api_platform.base_url), VIEW_REQUESTS, view="models")
    assert after - before == 3


def test_pages_keep_the_full_middleware(api_platform):
    response = httpx.get(f"{api_platform.base_url}/admin/login/", timeout=10)
    assert response.status_code == 200
    assert "csrftoken" in response.headers.get("set-cookie", "")
    assert response.headers["x-frame-options"] == "DENY"


def test_api_middleware_hooks_run_on_the_event_loop_thread(monkeypatch):
    """No hook of the API's chain goes through sync_to_async: each would be a hop to another
    thread and back for every request."""
    threads = []
    original = InlinePrometheusAfterMiddleware.process_request

    def recording(self, request):
        threads.append(threading.current_thread())
        return original(self, request)

    monkeypatch.setattr(InlinePrometheusAfterMiddleware, "process_request", recording)
    handler = ApiASGIHandler()
    sent = []

    async def request():
        scope = api_scope("GET", "/v1/models")
        messages = [{"type": "http.request", "body": b"", "more_body": False}]

        async def receive():
            return messages.pop(0) if messages else await asyncio.Event().wait()

        async def send(message):
            sent.append(message)

        await handler(scope, receive, send)
        return threading.current_thread()

    loop_thread = asyncio.run(request())
    assert sent[0]["status"] == 401  # no key: the view ran behind the chain
    assert threads == [loop_thread]


def test_a_finished_api_request_leaves_no_reference_cycles():
    """Daphne tells the application its client is gone once the response is sent. Django's
    handler raised that as a RequestAborted its task kept, re-raised into the handler's frame:
    a reference cycle through the request (its task, frames, body, headers, about 75 objects)
    that only a full collection freed, and under a flood those ran for tens of milliseconds
    in which no other request moved."""
    handler = ApiASGIHandler()
    scope = api_scope("POST", "/v1/completions")

    async def request():
        answered = asyncio.Event()
        messages = [{"type": "http.request", "body": b"", "more_body": False}]

        async def receive():
            if messages:
                return messages.pop(0)
            await answered.wait()  # as Daphne: the disconnect comes after the response
            return {"type": "http.disconnect"}

        async def send(message):
            if message["type"] == "http.response.body" and not message.get("more_body"):
                answered.set()

        await handler(scope, receive, send)

    async def requests(count: int):
        for _ in range(count):
            await request()

    asyncio.run(requests(3))  # what the first requests create once
    gc.collect()
    gc.disable()
    try:
        asyncio.run(requests(20))
        found = gc.collect()
    finally:
        gc.enable()
    assert found < 20  # (the event loop's own); before, 20 requests left 1,500 objects
