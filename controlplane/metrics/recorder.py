"""record_request: what an API process calls once when a request ends.

Intervals arrive already computed, each from the timestamps of one process (vLLM's rule:
monotonic clocks of different processes cannot be compared): TTFT, inter-token latencies and
e2e latency from the API process's own clock, queue, prefill and decode times from the
engine's. A value the caller does not have is None and is simply not observed.

The whole request goes to Redis as one Lua script call (one round trip, applied atomically:
a scrape sees a request entirely or not at all). Metrics never break a request: Redis errors
and bad values are logged and the observation is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import weakref

import redis.asyncio as aioredis

from controlplane.common.redis_pools import async_blocking_pool
from controlplane.metrics import definitions as d
from controlplane.metrics.store import SEP, HistogramDelta, MetricKeys, series_member

logger = logging.getLogger(__name__)

# A request path must not hang on a slow Redis for the sake of a metric.
REDIS_TIMEOUT_S = 2.0
# redis-py's default pool refuses the 101st concurrent command ("Too many connections"), and
# hundreds of streams can end at once in one Daphne process: they queue for a connection
# instead, for up to POOL_WAIT_S (a burst drains at thousands of requests a second).
MAX_CONNECTIONS = 32
POOL_WAIT_S = 10.0

# KEYS: the series set, the label set's hash. ARGV: series member, number of integer
# increments, then (field, amount) pairs: the integer ones first, then the float ones.
_RECORD_LUA = """
redis.call('SADD', KEYS[1], ARGV[1])
local num_int = tonumber(ARGV[2])
local i = 3
for _ = 1, num_int do
  redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1])
  i = i + 2
end
while i <= #ARGV do
  redis.call('HINCRBYFLOAT', KEYS[2], ARGV[i], ARGV[i + 1])
  i = i + 2
end
return 1
"""

_scripts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Writes under way, referenced until done (the event loop keeps only weak references).
_in_flight: set[asyncio.Future] = set()


def _record_script(url: str):
    """The record script on a client of this event loop (asyncio clients must not cross loops)."""
    loop = asyncio.get_running_loop()
    entry = _scripts.get(loop)
    if entry is None or entry[0] != url:
        pool = async_blocking_pool(
            url,
            max_connections=MAX_CONNECTIONS,
            timeout=POOL_WAIT_S,
            socket_timeout=REDIS_TIMEOUT_S,
            socket_connect_timeout=REDIS_TIMEOUT_S,
        )
        script = aioredis.Redis(connection_pool=pool).register_script(_RECORD_LUA)
        entry = (url, script)
        _scripts[loop] = entry
    return entry[1]


def _settings() -> tuple[str, str]:
    from django.conf import settings

    return settings.REDIS_URL, settings.PLATFORM_REDIS_PREFIX


def request_increments(
    *,
    finished_reason: str,
    prompt_tokens: int,
    generation_tokens: int,
    e2e_latency: float,
    time_to_first_token: float | None,
    inter_token_latencies: list[float],
    queue_time: float | None,
    prefill_time: float | None,
    decode_time: float | None,
    cached_tokens: int = 0,
) -> list[tuple[str, int | float]]:
    """The hash increments one finished request contributes (pure: no I/O)."""
    if prompt_tokens < 0 or generation_tokens < 0 or cached_tokens < 0:
        raise ValueError("token counts must be >= 0")
    observations: list[tuple[d.MetricSpec, list[float]]] = [
        (d.E2E_REQUEST_LATENCY, [e2e_latency]),
        (d.INTER_TOKEN_LATENCY, list(inter_token_latencies)),
        (d.REQUEST_PROMPT_TOKENS, [prompt_tokens]),
        (d.REQUEST_GENERATION_TOKENS, [generation_tokens]),
    ]
    optional = (
        (d.TIME_TO_FIRST_TOKEN, time_to_first_token),
        (d.REQUEST_QUEUE_TIME, queue_time),
        (d.REQUEST_PREFILL_TIME, prefill_time),
        (d.REQUEST_DECODE_TIME, decode_time),
    )
    observations.extend((spec, [value]) for spec, value in optional if value is not None)
    fields: list[tuple[str, int | float]] = [
        (f"{d.REQUEST_SUCCESS.field}{SEP}{finished_reason}", 1),
    ]
    if cached_tokens:
        fields.append((d.PROMPT_TOKENS_CACHED.field, cached_tokens))
    for spec, values in observations:
        delta = HistogramDelta(spec)
        delta.observe_many(values)
        fields.extend(delta.increments())
    return fields


async def record_request(
    *,
    model: str,
    tenant: str,
    finished_reason: str,
    prompt_tokens: int,
    generation_tokens: int,
    e2e_latency: float,
    time_to_first_token: float | None,
    inter_token_latencies: list[float],
    queue_time: float | None,
    prefill_time: float | None,
    decode_time: float | None,
    cached_tokens: int = 0,
) -> None:
    """Add one finished request to the shared request-level metrics (one Redis round trip).

    Never raises: a metric is not worth failing or delaying a response over. The write is
    shielded: a request task cancelled meanwhile (the client closed the connection right
    after the last chunk, as SDKs do) still gets its request counted.
    """
    try:
        fields = request_increments(
            finished_reason=finished_reason,
            prompt_tokens=prompt_tokens,
            generation_tokens=generation_tokens,
            e2e_latency=e2e_latency,
            time_to_first_token=time_to_first_token,
            inter_token_latencies=inter_token_latencies,
            queue_time=queue_time,
            prefill_time=prefill_time,
            decode_time=decode_time,
            cached_tokens=cached_tokens,
        )
    except Exception:
        logger.warning("request metrics for model %s dropped", model, exc_info=True)
        return
    task = asyncio.ensure_future(_write(model, tenant, fields))
    _in_flight.add(task)
    task.add_done_callback(_in_flight.discard)
    await asyncio.shield(task)


async def _write(model: str, tenant: str, fields: list[tuple[str, int | float]]) -> None:
    try:
        url, prefix = _settings()
        keys = MetricKeys(prefix)
        member = series_member(model, tenant)
        ints = [(name, n) for name, n in fields if not isinstance(n, float)]
        floats = [(name, x) for name, x in fields if isinstance(x, float)]
        args: list[str | int | float] = [member, len(ints)]
        for name, amount in (*ints, *floats):
            args += (name, repr(amount) if isinstance(amount, float) else amount)
        await _record_script(url)(keys=[keys.request_series, keys.request_hash(member)], args=args)
    except Exception:
        logger.warning("request metrics for model %s dropped", model, exc_info=True)
