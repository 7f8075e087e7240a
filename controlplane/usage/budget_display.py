"""This month's spend beside a budget, as the admin shows it: "8.1000 of 10.00 USD, 81% used"
on a change page (with a meter), "8.10 / 10.00 USD" over "81% used" in a list."""

from __future__ import annotations

from decimal import Decimal

from django.utils.html import format_html

from controlplane.billing.money import currency, format_amount
from controlplane.usage.spend import month_period, spend_for_key, spend_for_tenant, used_percent


def _used(spent_units: int, budget: Decimal | None, *, compact: bool):
    places = 2 if compact else 4
    spent = format_amount(spent_units, places=places).removesuffix(" " + currency())
    if budget is None:
        return format_html("{} {}<br><small>no budget</small>", spent, currency())
    percent = used_percent(spent_units, budget)
    if compact:
        return format_html(
            "{} / {} {}<br><strong>{}%</strong> used", spent, budget, currency(), f"{percent:.0f}"
        )
    return format_html(
        '{} of {} {} <meter min="0" max="100" low="80" high="99" optimum="0" value="{}">'
        "</meter> <strong>{}%</strong> used",
        spent,
        budget,
        currency(),
        f"{min(percent, 100.0):.1f}",
        f"{percent:.0f}",
    )


def tenant_spend_used(tenant, *, compact: bool = False):
    start, end = month_period()
    spent = spend_for_tenant(tenant_id=tenant.pk, start=start, end=end).cost_units
    return _used(spent, tenant.monthly_spend_budget, compact=compact)


def key_spend_used(key, *, compact: bool = False):
    start, end = month_period()
    spent = spend_for_key(
        tenant_id=key.tenant_id, key_prefix=key.prefix, start=start, end=end
    ).cost_units
    return _used(spent, key.monthly_spend_budget, compact=compact)
