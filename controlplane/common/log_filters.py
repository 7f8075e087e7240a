"""Logging filters (settings/logging.py)."""

from __future__ import annotations

import logging

# Probe paths whose 503 is an answer, not a failure: "not ready yet" (inference/views/health.py).
PROBE_PATHS = frozenset({"/ready"})


class NotReadyProbes(logging.Filter):
    """Drops django.request's ERROR line for a probe's 503. Load balancers and Kubernetes ask
    /ready every few seconds while an engine loads; each "not ready" is the endpoint working,
    and an ERROR line per probe would bury the real ones (and page whoever alerts on them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        is_probe = getattr(request, "path", None) in PROBE_PATHS
        return not (is_probe and getattr(record, "status_code", None) == 503)
