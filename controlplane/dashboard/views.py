"""The staff dashboard: a page, and the JSON it polls (live engines, usage per tenant).

Both need staff status and ``usage.view_dailyusage`` (the usage of every tenant is what they
show); superusers hold every permission.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict

from django.contrib import admin
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache

from controlplane.dashboard.selectors import (
    engine_replicas,
    live_engines,
    served_model_states,
    tenant_names_by_slug,
    tenant_spend,
    tenant_token_charts,
)
from engine.redis_outage import warn_failure

logger = logging.getLogger(__name__)

DASHBOARD_PERMISSION = "usage.view_dailyusage"


def _may_view(user) -> bool:
    return user.is_active and user.is_staff and user.has_perm(DASHBOARD_PERMISSION)


@staff_member_required
def dashboard(request: HttpRequest):
    if not _may_view(request.user):
        raise PermissionDenied("The dashboard needs the permission to view usage.")
    # The admin's context (site header, user links), so the page sits inside the admin.
    context = {**admin.site.each_context(request), "title": "Dashboard"}
    return render(request, "dashboard/index.html", context)


def _tenant_metrics() -> list[dict]:
    from controlplane.metrics import tenant_metrics_summary

    try:
        rows = [asdict(t) for t in tenant_metrics_summary()]
    except Exception as exc:  # the dashboard keeps working without Redis metrics
        warn_failure(logger, exc, "tenant metrics unavailable to the dashboard")
        return []
    # Metrics carry the tenant's slug; the charts name tenants as the admin does, and one
    # tenant is one name (and one colour) everywhere on the page.
    names = tenant_names_by_slug()
    for row in rows:
        row["slug"] = row["tenant"]
        row["tenant"] = names.get(row["slug"], row["slug"])
    return rows


@never_cache
def dashboard_data(request: HttpRequest) -> JsonResponse:
    if not _may_view(request.user):
        return JsonResponse({"error": "staff with the permission to view usage only"}, status=403)
    engines, redis_error = live_engines()
    fleet = engine_replicas()
    for engine in engines or []:
        deployment, node = fleet.get(engine["engine_id"], ("", ""))
        engine["deployment"], engine["node"] = deployment, node
    return JsonResponse(
        {
            "now": time.time(),
            "engines": engines or [],
            # Set while Redis cannot be read: the page says so instead of "no live engine".
            "redis_error": redis_error,
            "models": served_model_states(engines),
            **tenant_token_charts(),
            # Per-tenant prefix-cache hit rate and TTFT, from the request metrics in Redis.
            "tenants": _tenant_metrics(),
            "spend": tenant_spend(),
        }
    )
