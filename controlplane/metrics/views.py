"""GET /metrics on the API port: the exposition the request's token or address may read."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from controlplane.metrics.access import PROXY_HEADERS, MetricsAccessDenied, check_metrics_access
from controlplane.metrics.exposition import render_metrics


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    # Sync on purpose, as django-prometheus's view: the collector reads Redis with a blocking
    # client, so Django runs it in a worker thread.
    try:
        exposure = check_metrics_access(
            authorization=request.headers.get("Authorization"),
            client_host=request.META.get("REMOTE_ADDR"),
            proxied=any(header in request.headers for header in PROXY_HEADERS),
            dedicated_port=False,
        )
    except MetricsAccessDenied as denied:
        return HttpResponse(
            denied.message,
            status=denied.status,
            headers=denied.headers,
            content_type="text/plain; charset=utf-8",
        )
    return HttpResponse(render_metrics(exposure), content_type=CONTENT_TYPE_LATEST)
