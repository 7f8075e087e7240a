"""What authentication, rate limiting and usage recording cost per request.

Runs Django's real async request path (middleware, URL routing, an async view, JSON response)
in-process against a private Redis and a throwaway SQLite database, twice: a bare view, and the
same view calling the access policy the way the API views do (authenticate, admit, finish). The
difference of the medians is the control plane's cost. Every tenant limit is set (requests,
tokens, concurrency, monthly budget), so admission runs the full Lua script.

    .venv/bin/python bench/auth_overhead.py [--requests 2000] [--concurrency 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _setup(workdir: Path):
    from controlplane.launcher.redis_server import RedisServer

    redis = RedisServer(workdir / "redis").start()
    os.environ["REDIS_URL"] = redis.url
    os.environ["DATABASE_URL"] = f"sqlite:///{workdir / 'db.sqlite3'}"
    os.environ["DJANGO_SETTINGS_MODULE"] = "controlplane.settings"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return redis


def _urlconf():
    from django.http import JsonResponse
    from django.urls import path

    from controlplane.access import admission as admission_policy
    from inference import credentials

    body = {"object": "list", "data": [{"id": "tiny", "object": "model"}]}

    async def bare(request):
        return JsonResponse(body)

    async def guarded(request):
        principal = await credentials.authenticate(
            request.headers.get("Authorization"), endpoint="completions"
        )
        admission = await admission_policy.admit(
            principal, model="tiny", prompt_tokens=50, max_tokens=50
        )
        response = JsonResponse(body)
        for name, value in admission.headers.items():
            response[name] = value
        await admission_policy.finish(
            admission,
            prompt_tokens=50,
            completion_tokens=20,
            cached_tokens=0,
            status=200,
            finish_reason="stop",
            time_to_first_token=0.0,
            latency=0.0,
        )
        return response

    module = types.ModuleType("auth_overhead_urls")
    module.urlpatterns = [path("bare", bare), path("guarded", guarded)]
    sys.modules[module.__name__] = module
    return module.__name__


async def _measure(client, url: str, headers: dict, n: int, concurrency: int) -> list[float]:
    """Per-request latencies; the wall time of the whole batch is added to ``_walls[url]``."""
    timings: list[float] = []
    started = time.perf_counter()

    async def worker(count: int):
        for _ in range(count):
            start = time.perf_counter()
            response = await client.get(url, headers=headers)
            timings.append(time.perf_counter() - start)
            if response.status_code != 200:
                raise SystemExit(f"{url} answered {response.status_code}: {response.content!r}")

    per_worker = n // concurrency
    await asyncio.gather(*(worker(per_worker) for _ in range(concurrency)))
    _walls[url] = _walls.get(url, 0.0) + time.perf_counter() - started
    return timings


_walls: dict[str, float] = {}


def _summary(timings: list[float]) -> dict[str, float]:
    ms = sorted(t * 1000 for t in timings)
    return {
        "median": statistics.median(ms),
        "p90": ms[int(len(ms) * 0.9)],
        "p99": ms[int(len(ms) * 0.99)],
    }


async def _run(args) -> None:
    from django.conf import settings
    from django.test import AsyncClient

    from controlplane.access import admission as admission_policy
    from controlplane.tenants.services import api_key_create, tenant_create
    from controlplane.usage.events import usage_queue_key
    from controlplane.usage.services import usage_flush
    from inference import credentials

    settings.ROOT_URLCONF = _urlconf()
    big = 10**9
    tenant = await asyncio.to_thread(
        tenant_create,
        name="bench",
        requests_per_minute=big,
        tokens_per_minute=big,
        max_concurrent_requests=big,
        monthly_token_budget=big * 1000,
    )
    secret = (await asyncio.to_thread(api_key_create, tenant=tenant)).secret
    headers = {"Authorization": f"Bearer {secret}"}
    client = AsyncClient()

    # Warm up: first key load, script compilation, connection pools.
    await _measure(client, "/bare", {}, 200, 1)
    await _measure(client, "/guarded", headers, 200, 1)

    _walls.clear()
    rounds = {"bare": [], "guarded": []}
    # Interleave short rounds so drift (other processes on the machine) hits both alike.
    per_round = max(1, args.requests // 10)
    for _ in range(10):
        rounds["bare"] += await _measure(client, "/bare", {}, per_round, args.concurrency)
        rounds["guarded"] += await _measure(
            client, "/guarded", headers, per_round, args.concurrency
        )
    bare, guarded = _summary(rounds["bare"]), _summary(rounds["guarded"])

    # The three calls alone, without Django's request handling around them.
    calls = []
    for _ in range(per_round):
        start = time.perf_counter()
        principal = await credentials.authenticate(headers["Authorization"], endpoint="completions")
        admission = await admission_policy.admit(
            principal, model="tiny", prompt_tokens=50, max_tokens=50
        )
        await admission_policy.finish(
            admission,
            prompt_tokens=50,
            completion_tokens=20,
            cached_tokens=0,
            status=200,
            finish_reason="stop",
            time_to_first_token=0.0,
            latency=0.0,
        )
        calls.append(time.perf_counter() - start)
    direct = _summary(calls)

    await admission_policy.finish_pending()
    queued = await asyncio.to_thread(
        lambda: __import__("redis").Redis.from_url(settings.REDIS_URL).llen(usage_queue_key())
    )
    start = time.perf_counter()
    written = await asyncio.to_thread(usage_flush, max_batches=10**6)
    flush_s = time.perf_counter() - start

    print(f"requests per path: {len(rounds['bare'])}, concurrency {args.concurrency}")
    print(f"{'path':<34}{'median ms':>10}{'p90 ms':>10}{'p99 ms':>10}")
    for name, s in [
        ("bare async view", bare),
        ("with auth + limits + usage", guarded),
        ("access calls alone", direct),
    ]:
        print(f"{name:<34}{s['median']:>10.3f}{s['p90']:>10.3f}{s['p99']:>10.3f}")
    print(f"overhead at the median: {guarded['median'] - bare['median']:.3f} ms per request")
    n = len(rounds["bare"])
    bare_rps, guarded_rps = n / _walls["/bare"], n / _walls["/guarded"]
    print(
        f"throughput: bare {bare_rps:.0f} req/s, guarded {guarded_rps:.0f} req/s "
        f"(cost {1000 / guarded_rps - 1000 / bare_rps:.3f} ms of wall time per request)"
    )
    print(
        f"usage flush: {written} of {queued} queued records in {flush_s:.2f} s "
        f"({written / flush_s:.0f} records/s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per path")
    parser.add_argument("--concurrency", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        redis = _setup(Path(tmp))
        try:
            asyncio.run(_run(args))
        finally:
            redis.stop()


if __name__ == "__main__":
    main()
