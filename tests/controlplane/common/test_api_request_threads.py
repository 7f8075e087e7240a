"""The API handler's requests run their synchronous code on threads that outlive them
(controlplane/common/api_middleware.py): one thread per request in flight, reused by the next
request instead of started and joined for each (two thread starts a request, each holding the
event loop, stalled it under bursts), and Redis connections that do not read package metadata
each time one is opened."""

from __future__ import annotations

import asyncio
import threading
import time
from importlib import metadata

import pytest
from asgiref.sync import sync_to_async

from controlplane.common.api_middleware import RequestThreads


def _thread() -> int:
    return threading.get_ident()


async def _request(threads: RequestThreads, hold: asyncio.Event | None = None) -> set[int]:
    """A request making three thread-sensitive calls; the threads they ran on."""
    async with threads.lend():
        seen = {await sync_to_async(_thread)()}
        if hold is not None:
            await hold.wait()
        seen.add(await sync_to_async(_thread)())
        seen.add(await sync_to_async(_thread)())
        return seen


def test_requests_one_after_another_reuse_one_thread():
    async def main():
        threads = RequestThreads()
        seen = [await _request(threads) for _ in range(20)]
        return threads, seen

    threads, seen = asyncio.run(main())
    assert all(len(s) == 1 for s in seen)  # a request's calls stay on one thread
    assert len(set.union(*seen)) == 1 and threads.started == 1
    assert threading.get_ident() not in set.union(*seen)  # never the event loop's


def test_requests_in_flight_together_get_a_thread_each_and_keep_them():
    async def main():
        threads = RequestThreads()
        hold = asyncio.Event()
        burst = [asyncio.create_task(_request(threads, hold)) for _ in range(5)]
        await asyncio.sleep(0.05)
        hold.set()
        first = await asyncio.gather(*burst)
        hold.clear()
        burst = [asyncio.create_task(_request(threads, hold)) for _ in range(5)]
        await asyncio.sleep(0.05)
        hold.set()
        second = await asyncio.gather(*burst)
        return threads, first, second

    threads, first, second = asyncio.run(main())
    assert all(len(s) == 1 for s in first + second)
    assert len(set.union(*first)) == 5  # no two requests in flight share a thread
    assert set.union(*second) == set.union(*first)  # the next burst starts none
    assert threads.started == 5


def test_threads_beyond_the_idle_limit_end_after_a_burst():
    async def main():
        threads = RequestThreads(max_idle=2)
        hold = asyncio.Event()
        burst = [asyncio.create_task(_request(threads, hold)) for _ in range(5)]
        await asyncio.sleep(0.05)
        hold.set()
        return threads, set.union(*await asyncio.gather(*burst))

    threads, used = asyncio.run(main())
    assert threads.started == 5 and len(used) == 5 and len(threads._idle) == 2

    def alive() -> int:
        return sum(t.ident in used for t in threading.enumerate())

    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and alive() > 2:
        time.sleep(0.01)
    assert alive() == 2  # the three beyond the limit ended; two wait for the next requests


def test_opening_redis_connections_reads_no_package_metadata(monkeypatch):
    from controlplane.common.redis_pools import async_blocking_pool

    pool = async_blocking_pool("redis://127.0.0.1:1/0", max_connections=8, timeout=1.0)
    reads = []
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: reads.append(name) or real(name))
    connections = [pool.make_connection() for _ in range(4)]
    assert len(connections) == 4 and reads == []
    assert connections[0].driver_info.lib_version == real("redis")


# Database access allowed: the receivers that do run close this thread's connections, which
# earlier tests in the process may have opened.
@pytest.mark.django_db
def test_api_requests_skip_the_request_started_receivers_and_other_senders_keep_them():
    from django.core import signals
    from django.core.handlers.asgi import ASGIHandler
    from django.db import close_old_connections

    from controlplane.common.api_middleware import ApiASGIHandler

    calls = []

    def spy(sender, **kwargs):
        calls.append(sender)

    ApiASGIHandler()  # wraps request_started.asend for its class
    ApiASGIHandler()  # (once)
    signals.request_started.connect(spy, dispatch_uid="test-spy")
    try:
        asyncio.run(signals.request_started.asend(sender=ApiASGIHandler, scope={}))
        assert calls == []  # an API request: no receiver, so no hop to a thread
        asyncio.run(signals.request_started.asend(sender=ASGIHandler, scope={}))  # the admin's
        signals.request_started.send(sender=ASGIHandler, scope={})  # a sync sender
        assert calls == [ASGIHandler, ASGIHandler]
    finally:
        signals.request_started.disconnect(dispatch_uid="test-spy")
    # Django's own receivers stay connected for everyone else.
    assert close_old_connections in [ref() for _, ref, *_ in signals.request_started.receivers]
