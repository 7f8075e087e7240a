"""Monthly spend budgets in currency, through the real API: the flush prices usage, fires each
alert threshold once, and the API refuses the tenant (or the key) once its spend has reached
the budget, with a 429 in OpenAI's format that says why."""

from __future__ import annotations

import json
import threading
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from asgiref.sync import sync_to_async

from controlplane.audit.models import AuditEvent
from controlplane.billing.models import BudgetAlert
from controlplane.billing.services import model_price_set
from controlplane.billing.tasks import post_budget_alert
from controlplane.tenants.services import api_key_set_spend_budget, tenant_update
from controlplane.usage.services import usage_flush
from tests.controlplane.usage.finished_requests import finish_request

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


async def _chat(async_client, secret: str):
    return await async_client.post(
        "/v1/chat/completions",
        data=json.dumps(CHAT),
        content_type="application/json",
        headers={"Authorization": f"Bearer {secret}"},
    )


async def _spend(secret: str, *, completion_tokens: int) -> None:
    """One finished request costing completion_tokens / 1000 of the currency (1000 per
    million output tokens), written by the flush."""
    await finish_request(secret, prompt=0, completion=completion_tokens, cached=0)
    await sync_to_async(usage_flush)()


def _alerts(tenant) -> list[tuple[str, int]]:
    rows = BudgetAlert.objects.filter(tenant=tenant).order_by("threshold")
    return [(a.key_prefix, a.threshold) for a in rows]


@pytest.fixture
def priced(db):
    model_price_set(
        model="tiny", input_per_million=Decimal("0"), output_per_million=Decimal("1000")
    )


async def test_a_tenant_budget_alerts_once_at_80_and_refuses_once_spent(
    priced, make_tenant, make_key, async_client
):
    tenant = await sync_to_async(make_tenant)("Spender", monthly_spend_budget=Decimal("10.00"))
    _, secret = await sync_to_async(make_key)(tenant)

    await _spend(secret, completion_tokens=7_900)  # 7.90 of 10.00: below every threshold
    assert await sync_to_async(_alerts)(tenant) == []
    await _spend(secret, completion_tokens=200)  # 8.10: 80% crossed
    await _spend(secret, completion_tokens=100)  # 8.20: still 80%, no second alert
    assert await sync_to_async(_alerts)(tenant) == [("", 80)]
    audited = AuditEvent.objects.filter(action="budget.alert", target_id=str(tenant.pk))
    assert await audited.acount() == 1
    assert (await _chat(async_client, secret)).status_code != 429  # under budget: let in

    await _spend(secret, completion_tokens=1_800)  # 10.00: the budget is spent
    assert await sync_to_async(_alerts)(tenant) == [("", 80), ("", 100)]
    response = await _chat(async_client, secret)
    assert response.status_code == 429
    error = response.json()["error"]
    assert error["code"] == error["type"] == "insufficient_quota"
    assert "monthly spend budget of 10.00 USD for your account" in error["message"]

    # The operator raises the budget: the next request is let in, no alert fires again.
    await sync_to_async(tenant_update)(tenant=tenant, monthly_spend_budget=Decimal("20"))
    assert (await _chat(async_client, secret)).status_code != 429
    assert await audited.acount() == 1 + 1  # 80 and 100 only


async def test_a_key_budget_refuses_that_key_only(priced, make_tenant, make_key, async_client):
    tenant = await sync_to_async(make_tenant)("Two keys")
    capped, capped_secret = await sync_to_async(make_key)(tenant)
    _, free_secret = await sync_to_async(make_key)(tenant)
    await sync_to_async(api_key_set_spend_budget)(key=capped, monthly_spend_budget=Decimal("1"))

    await _spend(capped_secret, completion_tokens=1_000)  # 1.00: the key's budget is spent
    assert await sync_to_async(_alerts)(tenant) == [(capped.prefix, 80), (capped.prefix, 100)]
    response = await _chat(async_client, capped_secret)
    assert response.status_code == 429
    assert "budget of 1.00 USD for this API key" in response.json()["error"]["message"]
    assert (await _chat(async_client, free_secret)).status_code != 429


class _Receiver(BaseHTTPRequestHandler):
    """Answers 500 to the first ``failures`` POSTs, then 204; keeps the bodies it got."""

    failures = 2
    bodies: list[dict] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        self.send_response(500 if len(type(self).bodies) <= type(self).failures else 204)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_webhook_gets_the_alert_after_retries(make_tenant):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/alerts"
        tenant = make_tenant(
            "Hooked", monthly_spend_budget=Decimal("5"), budget_alert_webhook_url=url
        )
        alert = BudgetAlert.objects.create(
            tenant=tenant,
            period="2026-11-01",
            threshold=80,
            spent_units=4 * 10**10,
            budget=Decimal("5"),
            webhook_state="pending",
        )
        assert post_budget_alert.apply(args=[alert.pk]).get() == "sent"
    finally:
        server.shutdown()
    assert len(_Receiver.bodies) == 3  # two failures, then delivered
    assert _Receiver.bodies[-1] == {
        **_Receiver.bodies[-1],
        "type": "budget.threshold_reached",
        "tenant": "Hooked",
        "api_key_prefix": None,
        "period": "2026-11",
        "threshold_percent": 80,
        "spent": "4",
        "monthly_budget": "5.00",
        "currency": "USD",
    }
    alert.refresh_from_db()
    assert alert.webhook_state == "sent"
