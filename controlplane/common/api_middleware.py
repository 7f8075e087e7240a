"""The JSON API's own Django handler: the few middlewares an API request needs, run on the
event loop.

Under ASGI, Django runs every old-style (``MiddlewareMixin``) middleware hook through
``sync_to_async(thread_sensitive=True)``: a hop to one shared thread and back for each hook
of each request. The project's full stack (sessions, authentication, messages, CSRF, clickjacking,
axes, security, metrics) made about fifteen such hops a request, 3 to 4 ms of a 13 ms time to
first token through Daphne on a 2-core machine, for middlewares that serve browser pages: an API
request carries a key, not a session, and its views are CSRF-exempt.

So the ASGI application sends the API's paths to a second handler, ``ApiASGIHandler``, built
from ``settings.API_MIDDLEWARE``: the metrics (django-prometheus, which the Grafana dashboard
reads), the security headers, and the client's address. ``Inline`` versions of the first two
run their hooks on the event loop: they compute headers and counters and touch no database,
file or socket. Every other path (admin, portal, dashboard, docs, the management API) keeps
``settings.MIDDLEWARE`` through Django's own handler, and so do Django's test clients.

The API handler also keeps the threads its requests' synchronous code runs on
(``RequestThreads``). Django gives each request a context of its own whose first thread-sensitive
call (the ``request_started`` receivers, for every request) starts a new thread, and whose end
starts another to join it: two ``Thread.start`` calls a request, each holding the event loop until
the new thread first runs. Under a burst on a 2-core host that is where the loop stalled (its
lags of 40-240 ms, during which another tenant's request waited, all sat in these waits;
2026-11-26, py-spy and a lag probe in Daphne).

And an API request skips Django's ``request_started`` receivers (``reset_queries``,
``close_old_connections``), which would cost it a hop to its thread and back before its view
runs. Under a flood that hop waited for the event loop to come round again past every other
request in flight: 90-230 ms of another tenant's time to first token (traced per stage,
2026-11-26). They have nothing to do there: a new thread holds no connection, and a lent one had
``request_finished``'s ``close_old_connections`` run on it when its last request ended, which
closed what was obsolete and re-arms the health check for the next query. Every other sender
(Django's own handlers, the test clients) still runs them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

from asgiref.sync import ThreadSensitiveContext
from django.conf import settings
from django.core import signals
from django.core.handlers.asgi import ASGIHandler
from django.middleware.security import SecurityMiddleware
from django_prometheus.middleware import PrometheusAfterMiddleware, PrometheusBeforeMiddleware

from controlplane.common.tenant_lanes import TenantLanes, lane_by_address


class InlineHooks:
    """For a ``MiddlewareMixin`` whose request and response hooks do no I/O: under ASGI they
    run on the event loop instead of a thread."""

    async def __acall__(self, request):
        response = None
        if hasattr(self, "process_request"):
            response = self.process_request(request)
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            response = self.process_response(request, response)
        return response


class InlineSecurityMiddleware(InlineHooks, SecurityMiddleware):
    pass


class InlinePrometheusBeforeMiddleware(InlineHooks, PrometheusBeforeMiddleware):
    pass


class InlinePrometheusAfterMiddleware(InlineHooks, PrometheusAfterMiddleware):
    # Coroutine functions, so the async handler calls them as they are: a plain method would
    # be wrapped in sync_to_async (a thread hop) for every request.
    async def process_view(self, request, view_func, *view_args, **view_kwargs):
        return super().process_view(request, view_func, *view_args, **view_kwargs)

    async def process_template_response(self, request, response):
        return super().process_template_response(request, response)


class RequestThreads:
    """Threads lent to one request at a time, for its thread-sensitive synchronous code.

    What Django's per-request context promises stays: every synchronous call of one request
    runs on one thread, and no other request's runs there meanwhile (a request streaming for a
    minute keeps its thread, so a slow database call holds up no one else). What changes is that
    a thread outlives its request: it goes back to the idle list and serves the next one, so
    a steady load starts no thread at all, and a burst starts one per request in flight beyond
    the most seen before. Database connections follow the thread, and Django's
    ``request_started``/``request_finished`` receivers still run on it at each end of each
    request, closing them as ``CONN_MAX_AGE`` says (as under WSGI, where threads serve request
    after request). At most ``max_idle`` wait between bursts; a thread returned beyond them
    is told to end (without waiting for it: the event loop never blocks on a thread here). The
    bound is above a burst's size: at 64, each burst of 128 requests started 64 threads again
    at its start, while another tenant's request waited on the same event loop."""

    def __init__(self, max_idle: int = 256) -> None:
        self._idle: list[ThreadPoolExecutor] = []  # only the event loop's thread touches it
        self.max_idle = max_idle
        self.started = 0

    @asynccontextmanager
    async def lend(self) -> AsyncIterator[None]:
        if self._idle:
            executor = self._idle.pop()
        else:
            executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="api-request")
            self.started += 1
        try:
            async with ThreadSensitiveContext(executor=executor):
                yield
        finally:
            if len(self._idle) < self.max_idle:
                self._idle.append(executor)
            else:
                executor.shutdown(wait=False)


class ApiASGIHandler(ASGIHandler):
    """Django's ASGI handler with ``settings.API_MIDDLEWARE`` as its middleware, whose requests
    run their synchronous code on threads that outlive them (``RequestThreads``)."""

    def __init__(self, lane_of: Callable[[dict], Hashable] = lane_by_address) -> None:
        super().__init__()
        self.threads = RequestThreads()
        self.lanes = TenantLanes(width=settings.API_LANE_WIDTH, lease_s=settings.API_LANE_LEASE_S)
        self.lane_of = lane_of  # which lane a request's scope takes (tenant_lanes.py)
        _skip_request_started_for(type(self))

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":  # as Django's handler
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        slot = await self.lanes.enter(self.lane_of(scope))

        async def send_and_leave(message):
            if message["type"] == "http.response.start":
                slot.release()
            await send(message)

        try:
            async with self.threads.lend():
                await self.handle(scope, receive, send_and_leave)
        finally:
            slot.release()

    async def listen_for_disconnect(self, receive):
        """Return, not raise, when the client goes away: Django's handler cancels the view the
        same way either way, and a raised RequestAborted, kept by its task and re-raised into
        the handler's frame, made every request a reference cycle (task -> exception ->
        traceback -> frame -> tasks) that only a full collection freed."""
        message = await receive()
        if message["type"] != "http.disconnect":
            raise AssertionError(f"Invalid ASGI message after request body: {message['type']}")

    def load_middleware(self, is_async=False):
        # Django reads settings.MIDDLEWARE here and nowhere else per request; swapped for the
        # duration of this call only, at start-up, before any request is served.
        full = settings.MIDDLEWARE
        settings.MIDDLEWARE = settings.API_MIDDLEWARE
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = full


_skipped_senders: set[type] = set()


def _skip_request_started_for(sender: type) -> None:
    """``request_started.asend`` from ``sender`` returns at once (see the module docstring).
    Only ``asend``, the ASGI handlers' way to send it, is wrapped: the receivers stay connected
    for every other sender and for ``send`` (Django's test clients, WSGI)."""
    _skipped_senders.add(sender)
    signal = signals.request_started
    if "asend" in vars(signal):  # wrapped already
        return
    send_to_receivers = signal.asend

    async def asend(sender, **named):
        if sender in _skipped_senders:
            return []
        return await send_to_receivers(sender, **named)

    signal.asend = asend


class SplitByPath:
    """HTTP requests whose path ``is_api(path)`` holds go to ``api``, the rest to ``other``."""

    def __init__(self, api, other, is_api: Callable[[str], bool]):
        self.api, self.other, self.is_api = api, other, is_api

    async def __call__(self, scope, receive, send):
        app = self.api if self.is_api(scope.get("path", "")) else self.other
        return await app(scope, receive, send)
