"""Prometheus metrics under vLLM's names: engine status, request latencies, per-tenant figures.

- ``record_request(...)``: an API process calls it once when a request ends.
- ``register_collector()``: once per process (InferenceConfig.ready) so /metrics renders
  the vllm:* families next to django-prometheus's django_http_* ones.
- ``tenant_metrics_summary()`` / ``atenant_metrics_summary()``: per-tenant prefix-cache hit
  rate and TTFT percentiles for the admin dashboard.

docs/metrics.md lists every metric, its labels and where it is measured.
"""

from controlplane.metrics.collector import PlatformCollector, register_collector
from controlplane.metrics.definitions import exported_sample_names
from controlplane.metrics.recorder import record_request
from controlplane.metrics.tenant_summary import (
    TenantMetrics,
    atenant_metrics_summary,
    tenant_metrics_summary,
)

__all__ = [
    "PlatformCollector",
    "TenantMetrics",
    "atenant_metrics_summary",
    "exported_sample_names",
    "record_request",
    "register_collector",
    "tenant_metrics_summary",
]
