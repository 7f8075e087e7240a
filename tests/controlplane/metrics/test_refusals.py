"""Refusals by a tenant's limits are counted: ``platform:requests_refused_total`` by tenant and
reason on /metrics, and the dashboard's per-tenant figures, through the real API."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from prometheus_client.parser import text_string_to_metric_families

from controlplane.end_users.services import end_user_set_controls
from controlplane.metrics import atenant_metrics_summary, register_collector
from tests.controlplane.usage.finished_requests import finish_request

pytestmark = pytest.mark.django_db(transaction=True)

REFUSED = "platform:requests_refused"


async def test_each_refusal_is_counted_by_tenant_and_reason(
    make_tenant, make_key, async_client, redis_client, settings
):
    settings.METRICS_BEARER_TOKEN = "scrape-token"  # series naming tenants are behind it
    tenant = await sync_to_async(make_tenant)("Limited", requests_per_minute=1)
    _, secret = await sync_to_async(make_key)(tenant)
    await sync_to_async(end_user_set_controls)(tenant=tenant, name="mallory", blocked=True)

    async def chat(**extra):
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        response = await async_client.post(
            "/v1/chat/completions",
            data=json.dumps({**body, **extra}),
            content_type="application/json",
            headers={"Authorization": f"Bearer {secret}"},
        )
        return response.status_code

    assert await chat(user="mallory") == 403
    await finish_request(secret, prompt=3, completion=1)  # the one request of the minute
    assert [await chat(), await chat()] == [429, 429]

    [limited] = [t for t in await atenant_metrics_summary() if t.tenant == tenant.slug]
    assert limited.num_refused == 3
    register_collector()  # as the API processes do when they start
    scrape = await async_client.get("/metrics", headers={"Authorization": "Bearer scrape-token"})
    text = scrape.content.decode()
    [family] = [f for f in text_string_to_metric_families(text) if f.name == REFUSED]
    counted = {
        (s.labels["reason"], s.labels["model_name"]): s.value
        for s in family.samples
        if s.labels["tenant"] == tenant.slug and s.name.endswith("_total")
    }
    assert counted == {("requests", ""): 2, ("user_blocked", ""): 1}
