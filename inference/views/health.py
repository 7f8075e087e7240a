"""Liveness (/health: the API process is up) and readiness (/ready: an engine is alive)."""

from __future__ import annotations

from django.http import JsonResponse


async def health(request):
    return JsonResponse({"status": "ok"})


async def ready(request):
    """200 when an engine serves ``?model=`` (or any model when none is named), else 503.

    Unauthenticated like /health, so load balancers and Kubernetes probes can call it; it
    names models only when asked about one.
    """
    from inference.engine_client import EngineClient

    client = EngineClient.for_process()
    model = request.GET.get("model")
    if model:
        is_ready = await client.is_model_ready(model)
    else:
        is_ready = bool(await client.live_engines())
    if is_ready:
        return JsonResponse({"status": "ready"})
    response = JsonResponse({"status": "not ready"}, status=503)
    response["Retry-After"] = "5"
    return response
