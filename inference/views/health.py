"""Liveness (/health: the API process is up) and readiness (/ready: an engine is alive)."""

from __future__ import annotations

import logging

from django.http import JsonResponse
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)


async def health(request):
    return JsonResponse({"status": "ok"})


async def ready(request):
    """200 when an engine serves ``?model=`` (or any model when none is named), else 503.

    Unauthenticated like /health, so load balancers and Kubernetes probes can call it; it
    names models only when asked about one.
    """
    from inference.transport import EngineClient

    client = EngineClient.for_process()
    model = request.GET.get("model")
    try:
        if model:
            is_ready = await client.is_model_ready(model)
        else:
            is_ready = bool(await client.live_engines())
    except RedisError as exc:
        # Without Redis no request can reach an engine: not ready, and say why (in one line:
        # probes ask every few seconds through an outage).
        logger.warning("readiness check: Redis unreachable: %s", exc)
        response = JsonResponse({"status": "not ready", "reason": "redis unreachable"}, status=503)
        response["Retry-After"] = "5"
        return response
    if is_ready:
        return JsonResponse({"status": "ready"})
    response = JsonResponse({"status": "not ready"}, status=503)
    response["Retry-After"] = "5"
    return response
