"""Per-tenant figures for the admin dashboard: prefix-cache hit rate, TTFT and queue-wait
percentiles (how fair share treats each tenant: docs/architecture.md).

vLLM's prefix-cache counters are per engine, and engines serve every tenant, so neither vLLM
nor the Grafana anchors show these per tenant. They are read here from the same Redis hashes
/metrics renders, summed over every model (or one), since the metrics store began.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from controlplane.metrics import definitions as d
from controlplane.metrics.store import MetricKeys, StoredSeries, parse_series_member


@dataclass(frozen=True, slots=True)
class TenantMetrics:
    tenant: str
    num_requests: int
    prompt_tokens: int
    cached_prompt_tokens: int
    # cached / prompt tokens; None before the tenant's first prompt token.
    prefix_cache_hit_rate: float | None
    # Estimated from the TTFT histogram as Prometheus's histogram_quantile does.
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    # Time waiting before being scheduled, in the API process for the tenant's turn and in an
    # engine, from vllm:request_queue_time_seconds.
    queue_p50_s: float | None = None
    queue_p95_s: float | None = None
    # Refused by the tenant's limits or budgets before reaching an engine (not in num_requests).
    num_refused: int = 0


def histogram_quantile(q: float, cumulative: list[tuple[float, float]]) -> float | None:
    """The q-quantile of a histogram given as (upper bound, cumulative count), +Inf last.

    Linear interpolation inside the bucket that holds the rank, like PromQL's
    histogram_quantile; a rank in the +Inf bucket answers the highest finite bound.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within [0, 1], got {q}")
    if not cumulative or cumulative[-1][1] <= 0:
        return None
    rank = q * cumulative[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for upper_bound, count in cumulative:
        if count >= rank:
            if math.isinf(upper_bound):
                return lower_bound
            if count == lower_count:
                return upper_bound
            return lower_bound + (upper_bound - lower_bound) * (rank - lower_count) / (
                count - lower_count
            )
        lower_bound, lower_count = upper_bound, count
    return lower_bound


@dataclass(slots=True)
class _Totals:
    num_requests: int = 0
    num_refused: int = 0
    prompt_tokens: float = 0.0
    cached: int = 0
    ttft: list[int] | None = None
    queue: list[int] | None = None


def _add_counts(total: list[int] | None, histogram) -> list[int] | None:
    if histogram is None:
        return total
    counts = [count for _, count in histogram.cumulative]
    return counts if total is None else [a + b for a, b in zip(total, counts, strict=True)]


def _quantiles(spec, counts: list[int] | None) -> tuple[float | None, float | None]:
    """p50 and p95 of summed cumulative ``counts`` of histogram ``spec``."""
    cumulative = list(zip([*spec.buckets, math.inf], counts, strict=True)) if counts else []
    return histogram_quantile(0.5, cumulative), histogram_quantile(0.95, cumulative)


def summarize(series: list[tuple[tuple[str, str], StoredSeries]]) -> list[TenantMetrics]:
    """Fold stored label sets (model, tenant) into one TenantMetrics per tenant."""
    totals: dict[str, _Totals] = {}
    for (_model, tenant), stored in series:
        t = totals.setdefault(tenant, _Totals())
        t.num_requests += sum(stored.labelled_counter(d.REQUEST_SUCCESS.field).values())
        t.num_refused += sum(stored.labelled_counter(d.REQUESTS_REFUSED.field).values())
        t.cached += stored.counter(d.PROMPT_TOKENS_CACHED.field)
        prompts = stored.histogram(d.REQUEST_PROMPT_TOKENS)
        if prompts is not None:
            t.prompt_tokens += prompts.total
        t.ttft = _add_counts(t.ttft, stored.histogram(d.TIME_TO_FIRST_TOKEN))
        t.queue = _add_counts(t.queue, stored.histogram(d.REQUEST_QUEUE_TIME))
    result = []
    for tenant in sorted(totals):
        t = totals[tenant]
        ttft_p50, ttft_p95 = _quantiles(d.TIME_TO_FIRST_TOKEN, t.ttft)
        queue_p50, queue_p95 = _quantiles(d.REQUEST_QUEUE_TIME, t.queue)
        prompt_tokens = round(t.prompt_tokens)
        result.append(
            TenantMetrics(
                tenant=tenant,
                num_requests=t.num_requests,
                prompt_tokens=prompt_tokens,
                cached_prompt_tokens=t.cached,
                prefix_cache_hit_rate=(t.cached / prompt_tokens) if prompt_tokens else None,
                ttft_p50_s=ttft_p50,
                ttft_p95_s=ttft_p95,
                queue_p50_s=queue_p50,
                queue_p95_s=queue_p95,
                num_refused=t.num_refused,
            )
        )
    return result


def _keys() -> MetricKeys:
    from django.conf import settings

    return MetricKeys(settings.PLATFORM_REDIS_PREFIX)


def _filter(members: list[str], model: str | None) -> list[str]:
    members = sorted(members)
    if model is None:
        return members
    return [m for m in members if parse_series_member(m)[0] == model]


def tenant_metrics_summary(*, model: str | None = None) -> list[TenantMetrics]:
    """Per tenant (sorted by name): requests, prefix-cache hit rate, TTFT p50/p95."""
    from django.conf import settings

    from controlplane.common.redis_pools import sync_client

    keys = _keys()
    client = sync_client(settings.REDIS_URL)
    try:
        members = _filter([m.decode() for m in client.smembers(keys.request_series)], model)
        with client.pipeline(transaction=False) as pipe:
            for member in members:
                pipe.hgetall(keys.request_hash(member))
            hashes = pipe.execute() if members else []
    finally:
        client.close()
    return summarize(
        [(parse_series_member(m), StoredSeries(h)) for m, h in zip(members, hashes, strict=True)]
    )


async def atenant_metrics_summary(*, model: str | None = None) -> list[TenantMetrics]:
    """tenant_metrics_summary for async views."""
    from django.conf import settings

    from controlplane.common.redis_pools import async_client

    keys = _keys()
    client = async_client(settings.REDIS_URL)
    try:
        members = _filter([m.decode() for m in await client.smembers(keys.request_series)], model)
        async with client.pipeline(transaction=False) as pipe:
            for member in members:
                pipe.hgetall(keys.request_hash(member))
            hashes = await pipe.execute() if members else []
    finally:
        await client.aclose()
    return summarize(
        [(parse_series_member(m), StoredSeries(h)) for m, h in zip(members, hashes, strict=True)]
    )
