"""The Prometheus collector behind /metrics: engine gauges and counters, request histograms,
and the fleet's gauges (fleet.py, read from the database).

Read from Redis at scrape time, so every API process renders the same figures:
- engine-level series come from the live engines' status records (one series per engine;
  an engine that stops publishing drops out with its key's TTL);
- request-level series come from the shared hashes ``record_request`` writes (store.py).

Registered in prometheus_client's default REGISTRY, which django-prometheus's /metrics view
renders next to its own django_http_* metrics.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import redis
from prometheus_client.core import (
    REGISTRY,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from controlplane.common.engine_statuses import read_engine_statuses
from controlplane.common.redis_pools import sync_client
from controlplane.metrics import definitions as d
from controlplane.metrics.cold_start import ColdStartCollector
from controlplane.metrics.fleet import fleet_families
from controlplane.metrics.store import MetricKeys, StoredSeries, parse_series_member
from engine.protocol import EngineStatus, Keys
from engine.redis_outage import warn_failure

logger = logging.getLogger(__name__)

REDIS_TIMEOUT_S = 2.0
_FAMILY_TYPES = {
    "gauge": GaugeMetricFamily,
    "counter": CounterMetricFamily,
    "histogram": HistogramMetricFamily,
}


def _family(spec: d.MetricSpec) -> Metric:
    return _FAMILY_TYPES[spec.kind](spec.name, spec.documentation, labels=list(spec.labels))


class PlatformCollector(Collector):
    """Renders every metric in definitions.ALL_METRICS from Redis at each scrape.

    Each family is yielded even when it has no series yet, so its HELP and TYPE lines are
    there from the first scrape (as vLLM pre-creates its series).
    """

    def __init__(self, redis_url: str | None = None, prefix: str | None = None):
        # None: read Django settings at scrape time (tests repoint them after import).
        self._redis_url = redis_url
        self._prefix = prefix
        self._client: tuple[str, redis.Redis] | None = None
        self._lock = threading.Lock()

    def describe(self) -> list[Metric]:
        # Without describe() the registry would call collect() (and Redis) on registration.
        return [_family(spec) for spec in d.ALL_METRICS]

    def collect(self) -> Iterator[Metric]:
        client, prefix = self._connection()
        try:
            statuses = read_engine_statuses(client, Keys(prefix))
            request_series = _read_request_series(client, MetricKeys(prefix))
        except Exception as exc:  # /metrics must still answer, with django-prometheus's metrics
            warn_failure(logger, exc, "metrics: cannot read Redis, vllm:* series left out")
            statuses, request_series = [], []
        yield from _engine_families(statuses)
        yield from _request_families(request_series)
        yield from fleet_families()

    def _connection(self) -> tuple[redis.Redis, str]:
        url, prefix = self._redis_url, self._prefix
        if url is None or prefix is None:
            from django.conf import settings

            url = url or settings.REDIS_URL
            prefix = prefix if prefix is not None else settings.PLATFORM_REDIS_PREFIX
        with self._lock:  # scrapes may run in several threads of one process
            if self._client is None or self._client[0] != url:
                self._client = (
                    url,
                    sync_client(
                        url,
                        socket_timeout=REDIS_TIMEOUT_S,
                        socket_connect_timeout=REDIS_TIMEOUT_S,
                    ),
                )
            return self._client[1], prefix


def _read_request_series(
    client: redis.Redis, keys: MetricKeys
) -> list[tuple[tuple[str, str], StoredSeries]]:
    members = sorted(m.decode() for m in client.smembers(keys.request_series))
    if not members:
        return []
    with client.pipeline(transaction=False) as pipe:
        for member in members:
            pipe.hgetall(keys.request_hash(member))
        hashes = pipe.execute()
    return [
        (parse_series_member(member), StoredSeries(raw))
        for member, raw in zip(members, hashes, strict=True)
        if raw
    ]


def _engine_families(statuses: list[EngineStatus]) -> Iterator[Metric]:
    for spec, status_field in d.ENGINE_STATUS_FIELDS:
        family = _family(spec)
        for status in statuses:
            family.add_metric([status.model, status.engine_id], getattr(status, status_field))
        yield family
    # As vLLM: one series per engine whose labels carry the adapter names (comma-joined).
    lora = _family(d.LORA_REQUESTS_INFO)
    for status in statuses:
        lora.add_metric(
            [
                status.model,
                status.engine_id,
                str(status.max_lora),
                ",".join(status.waiting_lora_adapters),
                ",".join(status.running_lora_adapters),
            ],
            status.updated_at,
        )
    yield lora


def _request_families(
    series: list[tuple[tuple[str, str], StoredSeries]],
) -> Iterator[Metric]:
    success = _family(d.REQUEST_SUCCESS)
    cached = _family(d.PROMPT_TOKENS_CACHED)
    refused = _family(d.REQUESTS_REFUSED)
    histograms = {spec.name: _family(spec) for spec in d.REQUEST_HISTOGRAMS}
    for (model_name, tenant), stored in series:
        labels = [model_name, tenant]
        for reason, count in stored.labelled_counter(d.REQUEST_SUCCESS.field).items():
            success.add_metric([*labels, reason], count)
        for reason, count in stored.labelled_counter(d.REQUESTS_REFUSED.field).items():
            refused.add_metric([*labels, reason], count)
        cached.add_metric(labels, stored.counter(d.PROMPT_TOKENS_CACHED.field))
        for spec in d.REQUEST_HISTOGRAMS:
            histogram = stored.histogram(spec)
            if histogram is not None:
                histograms[spec.name].add_metric(labels, histogram.cumulative, histogram.total)
    yield success
    yield cached
    yield refused
    yield from histograms.values()


_registered: PlatformCollector | None = None
_registered_lock = threading.Lock()


def register_collector(registry: CollectorRegistry = REGISTRY) -> PlatformCollector:
    """Register the platform collector, and beside it the cold-start collector
    (``cold_start.py``), once per process (idempotent); returns the platform collector."""
    global _registered
    with _registered_lock:
        if registry is REGISTRY and _registered is not None:
            return _registered
        collector = PlatformCollector()
        registry.register(collector)
        registry.register(ColdStartCollector())
        if registry is REGISTRY:
            _registered = collector
        return collector
