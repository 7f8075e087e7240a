"""Writes on billing: set a model's price (a new row in its history) and fire budget alerts."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from controlplane.audit.services import audit_record
from controlplane.billing.models import BudgetAlert, ModelPrice
from controlplane.billing.money import amount_to_units, format_amount, price_steps
from controlplane.billing.tasks import post_budget_alert

# A price may start this far in the past: the time a form takes to submit. Earlier would
# reprice usage that may already have been written.
_BACKDATE_SLACK = timedelta(minutes=5)


def _check_price(name: str, value: Decimal | None) -> None:
    if value is None:
        return
    if value < 0:
        raise ValidationError(f"{name} must not be negative")
    try:
        price_steps(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


def model_price_check(
    *, model: str, prices: dict[str, Decimal | None], effective_from: datetime
) -> None:
    """Raise ValidationError unless this is a price ``model_price_set`` may record."""
    if not (model or "").strip():
        raise ValidationError("a price needs a model name")
    if effective_from < timezone.now() - _BACKDATE_SLACK:
        raise ValidationError(
            "a new price starts now or later: usage already recorded keeps its price"
        )
    for name, value in prices.items():
        _check_price(name, value)


@transaction.atomic
def model_price_set(
    *,
    model: str,
    input_per_million: Decimal,
    output_per_million: Decimal,
    cached_input_per_million: Decimal | None = None,
    effective_from: datetime | None = None,
    actor: Any = None,
    actor_label: str | None = None,
) -> ModelPrice:
    """A new price for ``model`` from ``effective_from`` (now when None) on. Usage already
    recorded keeps the price it was recorded at."""
    model = (model or "").strip()
    effective_from = effective_from or timezone.now()
    prices = {
        "input_per_million": input_per_million,
        "cached_input_per_million": cached_input_per_million,
        "output_per_million": output_per_million,
    }
    model_price_check(model=model, prices=prices, effective_from=effective_from)
    if ModelPrice.objects.filter(model=model, effective_from=effective_from).exists():
        raise ValidationError(f"{model} already has a price starting at {effective_from}")
    price = ModelPrice.objects.create(model=model, effective_from=effective_from, **prices)
    audit_record(
        actor=actor,
        actor_label=actor_label,
        action="model_price.set",
        target=price,
        details={
            "model": model,
            "effective_from": effective_from.isoformat(),
            **{k: None if v is None else str(v) for k, v in prices.items()},
        },
    )
    return price


def thresholds_reached(spent_units: int, budget: Decimal) -> list[int]:
    """The alert thresholds (percent, BUDGET_ALERT_THRESHOLDS) that spend has reached,
    compared exactly."""
    budget_units = amount_to_units(budget)
    return [t for t in settings.BUDGET_ALERT_THRESHOLDS if spent_units * 100 >= t * budget_units]


def budget_alerts_fire(
    *,
    tenant,
    period: date,
    spent_units: int,
    budget: Decimal,
    key_prefix: str = "",
    end_user: str = "",
) -> None:
    """Fire each threshold of a monthly budget that spend has reached (each once)."""
    for threshold in thresholds_reached(spent_units, budget):
        budget_alert_fire(
            tenant=tenant,
            key_prefix=key_prefix,
            end_user=end_user,
            period=period,
            threshold=threshold,
            spent_units=spent_units,
            budget=budget,
        )


def budget_alert_fire(
    *,
    tenant,
    key_prefix: str,
    period: date,
    threshold: int,
    spent_units: int,
    budget: Decimal,
    end_user: str = "",
) -> BudgetAlert | None:
    """Record that spend crossed ``threshold`` percent of a monthly budget (the tenant's, a
    key's or an end user's), once: the first call for a budget, month and threshold audits it
    and queues the tenant's webhook; later calls return None. Call it inside the transaction
    that wrote the spend."""
    webhook = tenant.budget_alert_webhook_url
    alert, created = BudgetAlert.objects.get_or_create(
        tenant=tenant,
        key_prefix=key_prefix,
        end_user=end_user,
        period=period,
        threshold=threshold,
        defaults={
            "spent_units": spent_units,
            "budget": budget,
            "webhook_state": "pending" if webhook else "",
        },
    )
    if not created:
        return None
    audit_record(
        actor_label="billing",
        action="budget.alert",
        target=tenant,
        details={
            "budget": alert.budget_of,
            "period": period.strftime("%Y-%m"),
            "threshold_percent": threshold,
            "spent": format_amount(spent_units),
            "monthly_budget": str(budget),
        },
    )
    if webhook:
        transaction.on_commit(lambda: post_budget_alert.delay(alert.pk))
    return alert
