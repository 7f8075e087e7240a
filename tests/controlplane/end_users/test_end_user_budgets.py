"""Budgets and blocks per end user, through the real API (Django's async client, a real
Redis): the end user a request names (``safety_identifier``, else ``user``) is refused once
blocked or once their month's spend reaches their budget, while the tenant's other end users
and requests naming none go on."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError

from controlplane.audit.models import AuditEvent
from controlplane.billing.models import BudgetAlert
from controlplane.billing.services import model_price_set
from controlplane.billing.spend_counters import end_user_spend_key
from controlplane.common.redis_clients import sync_redis
from controlplane.end_users.controls import controls_key
from controlplane.end_users.models import EndUser, EndUserMonthlySpend
from controlplane.end_users.services import (
    end_user_controls_heal,
    end_user_remove_controls,
    end_user_set_controls,
)
from controlplane.usage.events import encode_event, usage_queue_key
from controlplane.usage.services import usage_flush
from tests.controlplane.usage.finished_requests import finish_request, key_usage_event

pytestmark = pytest.mark.django_db(transaction=True)


async def _chat(async_client, secret: str, **naming):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    return await async_client.post(
        "/v1/chat/completions",
        data=json.dumps({**body, **naming}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {secret}"},
    )


async def _spend(secret: str, end_user: str, *, completion_tokens: int) -> None:
    """One finished request of ``end_user`` costing completion_tokens / 1000 of the currency,
    written by the flush."""
    await finish_request(
        secret, prompt=0, completion=completion_tokens, cached=0, end_user=end_user
    )
    await sync_to_async(usage_flush)()


def _refused_for(response) -> str:
    return response.json()["error"]["code"] if response.status_code in (403, 429) else ""


@pytest.fixture
def priced(db):
    model_price_set(
        model="tiny", input_per_million=Decimal("0"), output_per_million=Decimal("1000")
    )


async def test_the_budget_per_end_user_refuses_only_the_end_user_who_spent_it(
    priced, make_tenant, make_key, async_client
):
    tenant = await sync_to_async(make_tenant)("App", end_user_monthly_spend_budget=Decimal("1.00"))
    _, secret = await sync_to_async(make_key)(tenant)

    await _spend(secret, "alice", completion_tokens=600)  # 0.60 of 1.00
    assert _refused_for(await _chat(async_client, secret, user="alice")) == ""
    await _spend(secret, "alice", completion_tokens=400)  # 1.00: spent

    refused = await _chat(async_client, secret, user="alice")
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == error["type"] == "insufficient_quota"
    assert error["param"] == "user"
    assert "'alice' has reached their monthly spend budget" in error["message"]
    assert "retry-after" not in refused.headers  # waiting a minute would not help
    # safety_identifier names the end user over user, as on OpenAI.
    assert (
        await _chat(async_client, secret, safety_identifier="alice", user="bob")
    ).status_code == 429
    responses = await async_client.post(
        "/v1/responses",
        data=json.dumps({"model": "tiny", "input": "hi", "safety_identifier": "alice"}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {secret}"},
    )
    assert _refused_for(responses) == "insufficient_quota"
    # The tenant's other end users, and requests naming none, go on.
    assert _refused_for(await _chat(async_client, secret, user="bob")) == ""
    assert _refused_for(await _chat(async_client, secret)) == ""

    # Alerts, once per threshold, as for a tenant's or a key's budget (bob spent nothing).
    alerts = BudgetAlert.objects.filter(tenant=tenant).order_by("threshold")
    assert [(a.end_user, a.threshold) async for a in alerts] == [("alice", 80), ("alice", 100)]
    month = await EndUserMonthlySpend.objects.aget(tenant=tenant, end_user="alice")
    assert (month.num_requests, month.completion_tokens, month.cost) == (2, 1000, Decimal(1))
    assert int(sync_redis().get(end_user_spend_key(tenant.pk, "alice"))) == month.cost_units


async def test_an_end_users_own_budget_wins_over_the_tenants(
    priced, make_tenant, make_key, async_client
):
    tenant = await sync_to_async(make_tenant)(
        "Tiers", end_user_monthly_spend_budget=Decimal("1.00")
    )
    _, secret = await sync_to_async(make_key)(tenant)
    await sync_to_async(end_user_set_controls)(
        tenant=tenant, name="carol", monthly_spend_budget=Decimal("5.00")
    )
    await _spend(secret, "carol", completion_tokens=2_000)  # 2.00: over the default, not hers
    await _spend(secret, "dave", completion_tokens=1_000)  # 1.00: the default, spent
    assert _refused_for(await _chat(async_client, secret, user="carol")) == ""
    assert _refused_for(await _chat(async_client, secret, user="dave")) == "insufficient_quota"
    await _spend(secret, "carol", completion_tokens=3_000)  # 5.00: hers, spent
    assert _refused_for(await _chat(async_client, secret, user="carol")) == "insufficient_quota"


async def test_a_blocked_end_user_is_refused_at_once_and_let_in_once_unblocked(
    make_tenant, make_key, async_client
):
    # A tenant with no limits at all: its keys skip the limiter until it sets a control.
    tenant = await sync_to_async(make_tenant)("Open")
    _, secret = await sync_to_async(make_key)(tenant)
    assert _refused_for(await _chat(async_client, secret, user="mallory")) == ""

    blocked = await sync_to_async(end_user_set_controls)(
        tenant=tenant, name="mallory", blocked=True
    )
    response = await _chat(async_client, secret, user="mallory")
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "end_user_blocked" and "'mallory' is blocked" in error["message"]
    assert error["param"] == "user"
    # Named by safety_identifier (which overrides user), the refusal's param says so.
    named = await _chat(async_client, secret, user="other", safety_identifier="mallory")
    assert named.json()["error"]["param"] == "safety_identifier"
    embeddings = await async_client.post(
        "/v1/embeddings",
        data=json.dumps({"model": "tiny", "input": "hi", "user": "mallory"}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {secret}"},
    )
    assert embeddings.status_code == 403
    assert _refused_for(await _chat(async_client, secret, user="mallorx")) == ""

    await sync_to_async(end_user_remove_controls)(end_user=blocked)
    assert _refused_for(await _chat(async_client, secret, user="mallory")) == ""


async def test_controls_redis_lost_or_missed_are_put_right_by_the_heal_task(
    make_tenant, make_key, async_client
):
    tenant = await sync_to_async(make_tenant)("Forgetful")
    _, secret = await sync_to_async(make_key)(tenant)
    await sync_to_async(end_user_set_controls)(tenant=tenant, name="eve", blocked=True)
    sync_redis().delete(controls_key(tenant.pk))  # Redis restarted without persistence
    assert _refused_for(await _chat(async_client, secret, user="eve")) == ""

    assert await sync_to_async(end_user_controls_heal)() == 1
    assert _refused_for(await _chat(async_client, secret, user="eve")) == "end_user_blocked"
    assert await sync_to_async(end_user_controls_heal)() == 0  # nothing missing now
    # A removal Redis missed (away when it was saved): the stale block goes at the next heal.
    sync_redis().hset(controls_key(tenant.pk), "trent", "-1 1")
    assert _refused_for(await _chat(async_client, secret, user="trent")) == "end_user_blocked"
    assert await sync_to_async(end_user_controls_heal)() == 1
    assert _refused_for(await _chat(async_client, secret, user="trent")) == ""


def test_controls_are_checked_and_audited(make_tenant):
    tenant = make_tenant("Checked")
    with pytest.raises(ValidationError):
        end_user_set_controls(tenant=tenant, name="", blocked=True)
    with pytest.raises(ValidationError):
        end_user_set_controls(tenant=tenant, name="x" * 257, blocked=True)
    with pytest.raises(ValidationError):
        end_user_set_controls(tenant=tenant, name="frank", monthly_spend_budget=Decimal("-1"))
    assert not EndUser.objects.exists()

    end_user_set_controls(tenant=tenant, name=" frank ", monthly_spend_budget=Decimal("2.5"))
    end_user_set_controls(tenant=tenant, name=" frank ", monthly_spend_budget=Decimal("3"))
    row = EndUser.objects.get()
    assert row.name == " frank "  # matched byte for byte, as the requests send it
    actions = list(
        AuditEvent.objects.filter(
            target_type="end_users.enduser", target_id=str(row.pk)
        ).values_list("action", "details")
    )
    assert actions[0][0] == "end_user.update"
    assert actions[0][1]["monthly_spend_budget"] == ["2.50", "3"]
    assert {a for a, _ in actions} == {"end_user.create", "end_user.update"}
    assert sync_redis().hget(controls_key(tenant.pk), " frank ") == b"30000000000 0"


def test_a_replayed_usage_event_counts_once_in_the_end_users_month(priced, make_tenant, make_key):
    tenant = make_tenant("Replayed")
    key, _ = make_key(tenant)
    event = key_usage_event(
        key, model="tiny", prompt_tokens=0, completion_tokens=500, end_user="zoe"
    )
    other = key_usage_event(key, model="tiny", completion_tokens=7)  # names no end user
    sync_redis().rpush(
        usage_queue_key(), encode_event(event), encode_event(event), encode_event(other)
    )
    usage_flush()
    sync_redis().rpush(usage_queue_key(), encode_event(event))  # replayed from a spool, say
    usage_flush()

    (month,) = EndUserMonthlySpend.objects.filter(tenant=tenant)
    assert (month.end_user, month.num_requests, month.cost) == ("zoe", 1, Decimal("0.5"))
    assert int(sync_redis().get(end_user_spend_key(tenant.pk, "zoe"))) == month.cost_units


def test_a_control_saved_while_redis_is_away_is_kept_and_copied_by_the_heal(make_tenant, settings):
    tenant = make_tenant("Outage")
    working = settings.REDIS_URL
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    saved = end_user_set_controls(tenant=tenant, name="oscar", blocked=True)
    assert EndUser.objects.get(pk=saved.pk).blocked
    settings.REDIS_URL = working
    assert sync_redis().hget(controls_key(tenant.pk), "oscar") is None
    assert end_user_controls_heal() == 1
    assert sync_redis().hget(controls_key(tenant.pk), "oscar") == b"-1 1"
