"""Usage in the admin is billing data: shown with its cost, filtered by tenant, key and
model, exported as CSV, and never changed or deleted. Budgets show how much is used."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from controlplane.billing.models import ModelPrice
from controlplane.billing.services import model_price_set
from controlplane.tenants.services import api_key_set_spend_budget
from controlplane.usage.events import encode_event, usage_queue_key
from controlplane.usage.models import DailyUsage, UsageRecord
from controlplane.usage.services import usage_flush
from tests.controlplane.usage.finished_requests import key_usage_event

pytestmark = pytest.mark.django_db


def _queue(redis_client, key, *, completion: int, model: str = "tiny") -> None:
    event = key_usage_event(key, model=model, prompt_tokens=0, completion_tokens=completion)
    redis_client.rpush(usage_queue_key(), encode_event(event))


@pytest.fixture
def billed(redis_client, make_tenant, make_key):
    """Two tenants' usage at 1000 per million output tokens: Acme's key spent 8.1 of its
    tenant's 10.00 budget, Globex's 0.5 on another model."""
    model_price_set(model="tiny", input_per_million=Decimal(0), output_per_million=Decimal(1000))
    model_price_set(model="other", input_per_million=Decimal(0), output_per_million=Decimal(1000))
    acme = make_tenant("Acme", monthly_spend_budget=Decimal("10.00"))
    globex = make_tenant("Globex")
    acme_key, _ = make_key(acme)
    globex_key, _ = make_key(globex)
    _queue(redis_client, acme_key, completion=8_100)
    _queue(redis_client, globex_key, completion=500, model="other")
    assert usage_flush() == 2
    return acme, acme_key, globex, globex_key


@pytest.mark.parametrize("model", [UsageRecord, DailyUsage])
def test_usage_cannot_be_changed_or_deleted_from_the_admin(admin_client, billed, model):
    row = model.objects.first()
    name = f"admin:usage_{model._meta.model_name}"
    changelist = admin_client.get(reverse(f"{name}_changelist")).content.decode()
    assert "8.100000 USD" in changelist  # the cost column
    assert 'value="delete_selected"' not in changelist
    assert 'value="export_csv"' in changelist
    change_url = reverse(f"{name}_change", args=[row.pk])
    page = admin_client.get(change_url).content.decode()
    assert 'name="_save"' not in page and "deletelink" not in page
    assert admin_client.post(change_url, {"prompt_tokens": "0"}).status_code == 403
    assert (
        admin_client.post(reverse(f"{name}_delete", args=[row.pk]), {"post": "yes"}).status_code
        == 403
    )
    admin_client.post(
        reverse(f"{name}_changelist"),
        {"action": "delete_selected", "_selected_action": [row.pk], "post": "yes"},
    )
    assert model.objects.count() == 2
    assert model.objects.get(pk=row.pk).cost_units == row.cost_units


def test_daily_usage_filters_by_tenant_key_and_model(admin_client, billed):
    _, acme_key, globex, globex_key = billed
    url = reverse("admin:usage_dailyusage_changelist")
    for query, shown, hidden in [
        ({"tenant__id__exact": globex.pk}, globex_key, acme_key),
        ({"key_prefix": acme_key.prefix}, acme_key, globex_key),
        ({"model": "other"}, globex_key, acme_key),
    ]:
        page = admin_client.get(url, query).content.decode()
        rows = page.split('id="result_list"', 1)[1].split("</table>", 1)[0]
        assert shown.prefix in rows and hidden.prefix not in rows


def test_selected_records_and_a_period_export_as_csv(admin_client, billed):
    _, acme_key, *_ = billed
    record = UsageRecord.objects.get(key_prefix=acme_key.prefix)
    response = admin_client.post(
        reverse("admin:usage_usagerecord_changelist"),
        {"action": "export_csv", "_selected_action": [record.pk]},
    )
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [
        (r["tenant"], r["key_prefix"], r["completion_tokens"], r["cost"], r["currency"])
        for r in rows
    ] == [("Acme", acme_key.prefix, "8100", "8.1", "USD")]

    today = timezone.now().date()
    response = admin_client.get(
        reverse("admin:usage_export"),
        {"kind": "daily", "start": str(today - timedelta(days=1)), "end": str(today)},
    )
    assert response["Content-Disposition"].startswith('attachment; filename="usage-daily-')
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert sorted((r["tenant"], r["model"], r["cost"]) for r in rows) == [
        ("Acme", "tiny", "8.1"),
        ("Globex", "other", "0.5"),
    ]
    bad = admin_client.get(reverse("admin:usage_export"), {"kind": "daily", "start": "May"})
    assert bad.status_code == 400


def test_the_used_share_is_shown_beside_the_budget(admin_client, billed):
    acme, acme_key, *_ = billed
    page = admin_client.get(reverse("admin:tenants_tenant_change", args=[acme.pk])).content
    assert "8.1000 of 10.00 USD" in page.decode() and "<strong>81%</strong> used" in page.decode()
    listing = admin_client.get(reverse("admin:tenants_tenant_changelist")).content.decode()
    assert "8.10 / 10.00 USD<br><strong>81%</strong> used" in listing

    api_key_set_spend_budget(key=acme_key, monthly_spend_budget=Decimal("9"))
    page = admin_client.get(reverse("admin:tenants_apikey_change", args=[acme_key.pk]))
    assert "8.1000 of 9.00 USD" in page.content.decode()
    assert "<strong>90%</strong> used" in page.content.decode()


def test_a_price_in_effect_is_changed_by_a_new_row_not_edited(admin_client, billed):
    price = ModelPrice.objects.get(model="tiny")
    change_url = reverse("admin:billing_modelprice_change", args=[price.pk])
    assert admin_client.post(change_url, {"input_per_million": "9"}).status_code == 403
    response = admin_client.post(
        reverse("admin:billing_modelprice_add"),
        {
            "model": "tiny",
            "input_per_million": "0.5",
            "cached_input_per_million": "",
            "output_per_million": "2000",
            "effective_from_0": timezone.now().strftime("%Y-%m-%d"),
            "effective_from_1": (timezone.now() + timedelta(minutes=1)).strftime("%H:%M:%S"),
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    assert ModelPrice.objects.filter(model="tiny").count() == 2
    price.refresh_from_db()
    assert price.output_per_million == Decimal(1000)  # the old row is as it was
    backdated = admin_client.post(
        reverse("admin:billing_modelprice_add"),
        {
            "model": "tiny",
            "input_per_million": "1",
            "output_per_million": "1",
            "effective_from_0": "2020-01-01",
            "effective_from_1": "00:00:00",
        },
    )
    assert "usage already recorded keeps its price" in backdated.content.decode()
