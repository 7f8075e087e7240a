"""The staff dashboard: live engines from Redis status records, usage charts, staff only."""

from __future__ import annotations

import json
import time

import pytest
from django.urls import reverse

from controlplane.common.redis_clients import redis_key
from controlplane.dashboard.selectors import engine_status_list
from controlplane.usage.events import (
    UsageEvent,
    encode_event,
    usage_processing_key,
    usage_queue_key,
)
from controlplane.usage.models import DailyUsage, UsageRecord
from controlplane.usage.services import usage_flush

pytestmark = pytest.mark.django_db


def _publish(redis_client, model, engine_id, **fields):
    record = {"engine_id": engine_id, "model": model, **fields}
    redis_client.set(redis_key("status", model, engine_id), json.dumps(record), ex=5)


def _event(tenant, *, event_id: str = "") -> UsageEvent:
    """A request of 30 prompt and 12 completion tokens that just finished."""
    return UsageEvent(
        finished_at=time.time(),
        request_id="r1",
        tenant_id=tenant.pk,
        key_id=0,
        key_prefix="session",
        model="tiny",
        adapter="",
        prompt_tokens=30,
        completion_tokens=12,
        cached_tokens=0,
        time_to_first_token=0.1,
        latency=0.5,
        status=200,
        finish_reason="stop",
        event_id=event_id,
    )


def test_engine_status_tolerates_missing_fields_and_skips_garbage(redis_client):
    _publish(
        redis_client,
        "tiny",
        "e1",
        kv_cache_usage=0.25,
        num_running=3,
        tokens_per_s=120.5,
        prefix_cache_queries=10,
        prefix_cache_hits=4,
    )
    _publish(redis_client, "tiny", "e0")  # an engine that writes only its identity
    redis_client.set(redis_key("status", "tiny", "broken"), b"{not json", ex=5)
    engines = engine_status_list()
    assert [e["engine_id"] for e in engines] == ["e0", "e1"]
    assert engines[0]["num_waiting"] == 0 and engines[0]["adapters"] == []
    assert engines[1]["num_running"] == 3 and engines[1]["prefix_cache_hit_rate"] == 0.4


def test_dashboard_is_staff_only(client, django_user_model, redis_client):
    assert client.get(reverse("dashboard:index")).status_code == 302  # to the admin login
    assert client.get(reverse("dashboard:data")).status_code == 403
    user = django_user_model.objects.create_user("plain", password="pw-123456")
    client.force_login(user)
    assert client.get(reverse("dashboard:data")).status_code == 403


def test_dashboard_data_has_engines_and_tenant_usage(admin_client, redis_client, make_tenant):
    tenant = make_tenant("Acme")
    _publish(
        redis_client,
        "tiny",
        "e1",
        kv_cache_usage=0.5,
        num_running=2,
        num_waiting=1,
        tokens_per_s=42.0,
    )
    redis_client.rpush(usage_queue_key(), encode_event(_event(tenant)))

    page = admin_client.get(reverse("dashboard:index")).content.decode()
    assert "dashboard/chart.js" in page and 'id="chart-tenant-minutes"' in page

    data = admin_client.get(reverse("dashboard:data")).json()
    assert data["engines"][0]["model"] == "tiny" and data["engines"][0]["num_waiting"] == 1
    assert sum(data["tokens_per_minute"]["series"]["Acme"]) == 42
    assert data["tokens_per_day"]["series"]["Acme"][-1] == 42


def test_dashboard_data_reads_queued_usage_without_writing_it(
    admin_client, redis_client, make_tenant
):
    tenant = make_tenant("Acme")
    redis_client.rpush(usage_queue_key(), encode_event(_event(tenant, event_id="e-1")))

    def acme_tokens() -> tuple[int, int]:
        data = admin_client.get(reverse("dashboard:data")).json()
        return (
            sum(data["tokens_per_minute"]["series"]["Acme"]),
            data["tokens_per_day"]["series"]["Acme"][-1],
        )

    assert acme_tokens() == (42, 42)
    assert redis_client.llen(usage_queue_key()) == 1  # still queued: the read took nothing
    assert not UsageRecord.objects.exists() and not DailyUsage.objects.exists()
    # Once flushed, the same event is counted once (from the database), not twice; so is one
    # a crashed flush left behind in its processing list after committing it.
    usage_flush()
    redis_client.rpush(usage_processing_key(), encode_event(_event(tenant, event_id="e-1")))
    assert acme_tokens() == (42, 42)


def test_chart_assets_are_served_by_the_project(admin_client, redis_client):
    page = admin_client.get(reverse("dashboard:index")).content.decode()
    assert 'src="http' not in page and 'href="http' not in page  # nothing from elsewhere
    expected = {
        "dashboard/chart.js": b"drawLineChart",
        "dashboard/dashboard.js": b"renderEngines",
        "dashboard/dashboard.css": b"#dashboard",
    }
    for name, marker in expected.items():
        assert f"/static/{name}" in page
        response = admin_client.get(f"/static/{name}")
        assert response.status_code == 200, name
        assert marker in b"".join(response.streaming_content)


async def _record(tenant: str, *, prompt: int, cached: int, ttft: float) -> None:
    from controlplane.metrics import record_request

    await record_request(
        model="tiny",
        tenant=tenant,
        finished_reason="stop",
        prompt_tokens=prompt,
        generation_tokens=4,
        e2e_latency=ttft + 0.2,
        time_to_first_token=ttft,
        inter_token_latencies=[0.05] * 3,
        queue_time=None,
        prefill_time=None,
        decode_time=None,
        cached_tokens=cached,
    )


def test_dashboard_shows_prefix_cache_hit_rate_and_ttft_per_tenant(admin_client, redis_client):
    import asyncio

    async def traffic():
        await _record("acme", prompt=100, cached=0, ttft=0.08)
        await _record("acme", prompt=100, cached=80, ttft=0.02)
        await _record("globex", prompt=50, cached=0, ttft=0.3)

    asyncio.run(traffic())
    page = admin_client.get(reverse("dashboard:index")).content.decode()
    assert 'id="tenants"' in page and "prefix-cache hit rate" in page
    tenants = {
        t["tenant"]: t for t in admin_client.get(reverse("dashboard:data")).json()["tenants"]
    }
    assert tenants["acme"]["num_requests"] == 2
    assert tenants["acme"]["prefix_cache_hit_rate"] == pytest.approx(0.4)
    assert tenants["globex"]["prefix_cache_hit_rate"] == 0
    assert tenants["acme"]["ttft_p50_s"] < tenants["globex"]["ttft_p50_s"]


def test_every_model_is_listed_with_what_serves_it(admin_client, redis_client, tmp_path):
    from controlplane.deployments.models import ServedModel
    from controlplane.fleet.models import Deployment, Node, Replica

    def model(name, **fields):
        return ServedModel.objects.create(
            name=name, path=str(tmp_path), architecture="LlamaForCausalLM", **fields
        )

    model("live")
    model("nobody")
    model("coming")
    model("sleepy")
    model("fetching", state=ServedModel.State.REGISTERING, stage="downloading 2 files")
    node = Node.objects.create(name="gpu-1")
    coming = Deployment.objects.create(
        name="coming", served_model=ServedModel.objects.get(name="coming")
    )
    Replica.objects.create(deployment=coming, node=node, state=Replica.State.LOADING)
    Deployment.objects.create(
        name="sleepy",
        served_model=ServedModel.objects.get(name="sleepy"),
        replicas=0,
        scale_to_zero=True,
    )
    live = Deployment.objects.create(
        name="live-d", served_model=ServedModel.objects.get(name="live")
    )
    Replica.objects.create(deployment=live, node=node, state=Replica.State.READY, engine_id="e9")
    _publish(redis_client, "live", "e9", pid=4321, hostname="gpu-1")

    data = admin_client.get(reverse("dashboard:data")).json()
    states = {m["model"]: (m["state"], m["detail"]) for m in data["models"]}
    assert states == {
        "coming": ("starting", "1 replica starting"),
        "fetching": ("registering", "downloading 2 files"),
        "live": ("serving", "1 engine live"),
        "nobody": ("no engine", "nothing serves it: deploy it, or start an engine"),
        "sleepy": ("scaled to zero", "loads on the first request"),
    }
    [engine] = data["engines"]
    assert (engine["deployment"], engine["node"], engine["pid"]) == ("live-d", "gpu-1", 4321)


def test_redis_away_says_the_engines_are_unknown_without_failing_or_tracebacks(
    admin_client, redis_client, settings, caplog, tmp_path
):
    """What an operator opens during an outage: before, data.json answered 500 (and the page
    said nothing but 'update failed'); a line per failed read, not a traceback."""
    from controlplane.deployments.models import ServedModel

    ServedModel.objects.create(name="m", path=str(tmp_path), architecture="LlamaForCausalLM")
    ServedModel.objects.create(
        name="off", path=str(tmp_path), architecture="LlamaForCausalLM", is_active=False
    )
    reachable = settings.REDIS_URL
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    with caplog.at_level("WARNING"):
        response = admin_client.get(reverse("dashboard:data"))
    assert response.status_code == 200
    data = response.json()
    assert data["engines"] == [] and "Redis cannot be read" in data["redis_error"]
    states = {m["model"]: m["state"] for m in data["models"]}
    assert states == {"m": "unknown", "off": "inactive"}
    lines = [r for r in caplog.records if r.name.startswith("controlplane.dashboard")]
    assert len(lines) == 3 and all(r.exc_info is None for r in lines)

    settings.REDIS_URL = reachable
    assert admin_client.get(reverse("dashboard:data")).json()["redis_error"] is None
