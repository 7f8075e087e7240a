"""record_request: what an API process calls once when a request ends.

Intervals arrive already computed, each from the timestamps of one process (vLLM's rule:
monotonic clocks of different processes cannot be compared): TTFT, inter-token latencies and
e2e latency from the API process's own clock, queue, prefill and decode times from the
engine's. A value the caller does not have is None and is simply not observed.

Requests go to Redis as Lua script calls, each applied atomically (a scrape sees a request
entirely or not at all). A request that ends while this process's previous write is under
way joins the next one, with every other request that ends meanwhile: one round trip and one
script for all of them, their increments summed per label set and field. A request alone
still costs one round trip, and ``record_request`` returns once the write holding its
request has been applied, as before. Each script call was about 40 hash increments (120 us of
Redis's one thread) and 90 arguments packed in the API's event loop; a flood ending eight
requests a step paid that eight times a step. Metrics never break a request: Redis errors and
bad values are logged and the observation is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import weakref

import redis.asyncio as aioredis

from controlplane.common.redis_pools import async_blocking_pool
from controlplane.metrics import definitions as d
from controlplane.metrics.store import SEP, HistogramDelta, MetricKeys, series_member
from engine.redis_outage import warn_failure

logger = logging.getLogger(__name__)

# A request path must not hang on a slow Redis for the sake of a metric.
REDIS_TIMEOUT_S = 2.0
# redis-py's default pool refuses the 101st concurrent command ("Too many connections"), and
# hundreds of streams can end at once in one Daphne process: they queue for a connection
# instead, for up to POOL_WAIT_S (a burst drains at thousands of requests a second).
MAX_CONNECTIONS = 32
POOL_WAIT_S = 10.0

# KEYS: the series set, then one label set's hash per series. ARGV, per series in that order:
# its member, its number of integer increments, of float ones, then the (field, amount)
# pairs, the integer ones first.
_RECORD_LUA = """
local a = 1
for k = 2, #KEYS do
  redis.call('SADD', KEYS[1], ARGV[a])
  local num_int, num_float = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  a = a + 3
  for _ = 1, num_int do
    redis.call('HINCRBY', KEYS[k], ARGV[a], ARGV[a + 1])
    a = a + 2
  end
  for _ = 1, num_float do
    redis.call('HINCRBYFLOAT', KEYS[k], ARGV[a], ARGV[a + 1])
    a = a + 2
  end
end
return 1
"""

Increments = dict[str, int | float]  # hash field -> amount


class _Batch:
    """The requests of one write: per series member, the sum of their increments."""

    __slots__ = ("applied", "models", "series")

    def __init__(self) -> None:
        self.series: dict[str, Increments] = {}
        self.models: set[str] = set()
        # Resolved once the write has been applied or dropped.
        self.applied: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def add(self, model: str, member: str, fields: list[tuple[str, int | float]]) -> None:
        self.models.add(model)
        sums = self.series.setdefault(member, {})
        for name, amount in fields:
            sums[name] = sums.get(name, 0) + amount

    def script_input(self, keys: MetricKeys) -> tuple[list[str], list[str | int]]:
        names, args = [keys.request_series], []
        for member, sums in self.series.items():
            # An int field stays an int; a float in a sum (a histogram's ``sum``) makes it one.
            ints = [(name, n) for name, n in sums.items() if not isinstance(n, float)]
            floats = [(name, x) for name, x in sums.items() if isinstance(x, float)]
            names.append(keys.request_hash(member))
            args += (member, len(ints), len(floats))
            for name, amount in ints:
                args += (name, amount)
            for name, amount in floats:
                args += (name, repr(amount))
        return names, args


class _Writer:
    """This event loop's metrics writes: one under way at a time, the requests that end
    meanwhile gathered into the next."""

    def __init__(self, url: str, prefix: str) -> None:
        pool = async_blocking_pool(
            url,
            max_connections=MAX_CONNECTIONS,
            timeout=POOL_WAIT_S,
            socket_timeout=REDIS_TIMEOUT_S,
            socket_connect_timeout=REDIS_TIMEOUT_S,
        )
        self.url, self.keys = url, MetricKeys(prefix)
        self.script = aioredis.Redis(connection_pool=pool).register_script(_RECORD_LUA)
        self._next: _Batch | None = None
        # The task writing batches until none is left; the loop keeps only weak references.
        self._task: asyncio.Task | None = None

    def add(self, model: str, member: str, fields: list[tuple[str, int | float]]) -> _Batch:
        if self._next is None:
            self._next = _Batch()
        self._next.add(model, member, fields)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._write_all())
        return self._next

    async def _write_all(self) -> None:
        try:
            while (batch := self._next) is not None:
                self._next = None
                try:
                    names, args = batch.script_input(self.keys)
                    await self.script(keys=names, args=args)
                except Exception as exc:
                    models = ", ".join(sorted(batch.models))
                    warn_failure(logger, exc, "request metrics for model %s dropped", models)
                finally:
                    batch.applied.set_result(None)
        finally:
            self._task = None


_writers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _writer() -> _Writer:
    """The writer of this event loop (asyncio clients must not cross loops)."""
    loop = asyncio.get_running_loop()
    url, prefix = _settings()
    writer = _writers.get(loop)
    if writer is None or (writer.url, writer.keys.prefix) != (url, prefix):
        writer = _writers[loop] = _Writer(url, prefix)
    return writer


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
    """Add one finished request to the shared request-level metrics: one Redis round trip,
    shared with the requests of this process that end while the previous write is under way.

    Returns once the write holding the request has been applied (or dropped). Never raises:
    a metric is not worth failing or delaying a response over. The write is shielded: a
    request task cancelled meanwhile (the client closed the connection right after the last
    chunk, as SDKs do) still gets its request counted.
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
        batch = _writer().add(model, series_member(model, tenant), fields)
    except Exception:
        logger.warning("request metrics for model %s dropped", model, exc_info=True)
        return
    await asyncio.shield(batch.applied)


async def record_refusal(*, model: str, tenant: str, reason: str) -> None:
    """Count one request the tenant's limits refused (``reason``: the limiter's), in the same
    writes as finished requests. Never raises."""
    try:
        field = f"{d.REQUESTS_REFUSED.field}{SEP}{reason}"
        batch = _writer().add(model, series_member(model, tenant), [(field, 1)])
    except Exception:
        logger.warning("refusal metric for tenant %s dropped", tenant, exc_info=True)
        return
    await asyncio.shield(batch.applied)
