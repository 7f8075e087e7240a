"""/metrics over Django: django-prometheus's HTTP metrics and the platform's vllm:* ones."""

from __future__ import annotations

import time

from prometheus_client.parser import text_string_to_metric_families

from controlplane.metrics import register_collector
from controlplane.metrics.definitions import ALL_METRICS
from engine import protocol
from engine.protocol import EngineStatus, Keys


async def test_metrics_endpoint_serves_vllm_and_django_metrics(redis_client, async_client):
    register_collector()
    register_collector()  # idempotent: a second registration would raise in prometheus_client
    keys = Keys()
    status = EngineStatus(engine_id="e1", model="tiny", num_running=2, updated_at=time.time())
    redis_client.sadd(keys.engines(), protocol.engine_member("tiny", "e1"))
    redis_client.set(keys.status("tiny", "e1"), protocol.encode_status(status), ex=5)

    await async_client.get("/health")
    response = await async_client.get("/metrics")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    for spec in ALL_METRICS:
        assert spec.name in families, spec.name
    running = families["vllm:num_requests_running"].samples
    assert [(s.labels, s.value) for s in running] == [({"model_name": "tiny", "engine": "e1"}, 2)]
    assert "django_http_requests_total_by_view_transport_method" in families
    assert "django_http_responses_total_by_status" in families
