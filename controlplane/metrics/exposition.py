"""The /metrics text: every series, or only those that name no tenant and no adapter.

The reduced exposition keeps every family (its HELP and TYPE lines) and drops the samples
labelled ``tenant`` (the request metrics, whose ``model_name`` may also be an adapter's name)
and those of ``vllm:lora_requests_info`` (adapter names). What remains, the engine series and
django-prometheus's, is what autoscalers and routers read.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from controlplane.metrics import definitions as d
from controlplane.metrics.access import Exposure

TENANT_LABEL = "tenant"
ADAPTER_FAMILIES = frozenset({d.LORA_REQUESTS_INFO.name})


class _WithoutTenantSeries(Collector):
    """A view of a registry without the samples that name a tenant or an adapter."""

    def __init__(self, registry: Collector):
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            hidden = family.name in ADAPTER_FAMILIES
            samples = [s for s in family.samples if not hidden and TENANT_LABEL not in s.labels]
            if len(samples) == len(family.samples):
                yield family
                continue
            kept = Metric(family.name, family.documentation, family.type, family.unit)
            kept.samples = samples
            yield kept


_multiprocess_registry: CollectorRegistry | None = None
_multiprocess_lock = threading.Lock()


def served_registry() -> Collector:
    """What /metrics renders: this process's REGISTRY; with several API processes on one port
    (``PROMETHEUS_MULTIPROC_DIR`` set: Stack.start_api), a registry that sums every process's
    django-prometheus series from that directory (prometheus_client's multiprocess mode),
    beside the platform's collectors, which read Redis and so are the same from any process.
    Per-process series (``process_*``, ``python_gc_*``) are left out there: a scrape reaches
    one process of several, chosen by the kernel."""
    global _multiprocess_registry
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    with _multiprocess_lock:
        if _multiprocess_registry is None:
            from controlplane.metrics.collector import register_collector

            registry = CollectorRegistry()
            MultiProcessCollector(registry)
            register_collector(registry)
            _multiprocess_registry = registry
    return _multiprocess_registry


def render_metrics(exposure: Exposure, registry: Collector | None = None) -> bytes:
    """The Prometheus text exposition of ``registry`` (default: :func:`served_registry`) that
    ``exposure`` may read."""
    if registry is None:
        registry = served_registry()
    if exposure is Exposure.WITHOUT_TENANTS:
        registry = _WithoutTenantSeries(registry)
    return generate_latest(registry)
