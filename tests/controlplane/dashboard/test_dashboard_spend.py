"""The dashboard's spend per tenant: this month beside each budget, and per day."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from controlplane.billing.services import model_price_set
from controlplane.usage.events import encode_event, usage_queue_key
from controlplane.usage.services import usage_flush
from tests.controlplane.usage.finished_requests import key_usage_event

pytestmark = pytest.mark.django_db


def test_dashboard_shows_spend_per_tenant(admin_client, redis_client, make_tenant, make_key):
    model_price_set(model="m", input_per_million=Decimal("1"), output_per_million=Decimal("1000"))
    budgeted = make_tenant("Budgeted", monthly_spend_budget=Decimal("10.00"))
    open_ended = make_tenant("Open ended")
    make_tenant("Idle")  # neither spend nor a budget: not listed
    for tenant, completion in ((budgeted, 8_100), (open_ended, 50)):
        key, _ = make_key(tenant)
        event = key_usage_event(key, prompt_tokens=1000, completion_tokens=completion)
        redis_client.rpush(usage_queue_key(), encode_event(event))
    usage_flush()

    page = admin_client.get(reverse("dashboard:index")).content.decode()
    assert 'id="spend"' in page and 'id="chart-tenant-spend"' in page
    spend = admin_client.get(reverse("dashboard:data")).json()["spend"]
    assert spend["currency"] == "USD"
    assert spend["this_month"] == [
        {"tenant": "Budgeted", "spent": "8.101", "budget": "10.00", "used_percent": 81.0},
        {"tenant": "Open ended", "spent": "0.051", "budget": None, "used_percent": None},
    ]
    assert spend["per_day"]["series"]["Budgeted"][-1] == "8.101"
    assert spend["per_day"]["series"]["Open ended"][:-1] == ["0"] * 13
