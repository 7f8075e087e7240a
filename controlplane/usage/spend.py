"""Reads on spend: tokens and cost per tenant, key, model and day over a period.

Every function takes the tenant (a tenant-facing page can never read another's spend by
accident) and a period of UTC days, ``start`` included and ``end`` excluded (``month_period``
gives this month's). Spend comes from the daily rollups, so it includes every request the
usage flush has written (it runs every few seconds).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.db.models import QuerySet, Sum

from controlplane.billing.money import amount_text, amount_to_units, units_to_amount
from controlplane.tenants.models import Tenant
from controlplane.usage.models import DailyUsage

_SUMMED = ("num_requests", "num_errors", "prompt_tokens", "completion_tokens", "cached_tokens")


@dataclass(frozen=True, slots=True)
class Spend:
    """Totals over a period. ``cost`` is exact (see controlplane/billing/money.py)."""

    num_requests: int = 0
    num_errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_units: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def cost(self) -> Decimal:
        return units_to_amount(self.cost_units)


def used_percent(spent_units: int, budget: Decimal) -> float:
    """Spend as a percentage of a budget (an amount of the currency)."""
    budget_units = amount_to_units(budget)
    return 100.0 * spent_units / budget_units if budget_units else 0.0


def month_period(day: date | None = None) -> tuple[date, date]:
    """The calendar month (UTC) holding ``day`` (today when None): (first day, next first)."""
    day = day or datetime.now(UTC).date()
    start = day.replace(day=1)
    return start, (start + timedelta(days=32)).replace(day=1)


def _rows(*, tenant_id: int, start: date, end: date, key_prefix: str | None = None) -> QuerySet:
    qs = DailyUsage.objects.filter(tenant_id=tenant_id, date__gte=start, date__lt=end)
    return qs if key_prefix is None else qs.filter(key_prefix=key_prefix)


def _spend(row: dict) -> Spend:
    return Spend(**{name: row.get(name) or 0 for name in (*_SUMMED, "cost_units")})


def _summed(qs: QuerySet, *group: str) -> QuerySet:
    sums = {name: Sum(name) for name in (*_SUMMED, "cost_units")}
    return qs.values(*group).annotate(**sums).order_by(*group) if group else qs.aggregate(**sums)


def spend_for_tenant(*, tenant_id: int, start: date, end: date) -> Spend:
    return _spend(_summed(_rows(tenant_id=tenant_id, start=start, end=end)))


def spend_for_key(*, tenant_id: int, key_prefix: str, start: date, end: date) -> Spend:
    """One key's spend (``key_prefix`` as on the key; "session" for a staff playground)."""
    rows = _rows(tenant_id=tenant_id, start=start, end=end, key_prefix=key_prefix)
    return _spend(_summed(rows))


def spend_by_key(*, tenant_id: int, start: date, end: date) -> dict[str, Spend]:
    rows = _summed(_rows(tenant_id=tenant_id, start=start, end=end), "key_prefix")
    return {row["key_prefix"]: _spend(row) for row in rows}


def spend_by_model(
    *, tenant_id: int, start: date, end: date, key_prefix: str | None = None
) -> dict[str, Spend]:
    """Per served model (an adapter's requests count under their base model)."""
    rows = _rows(tenant_id=tenant_id, start=start, end=end, key_prefix=key_prefix)
    return {row["model"]: _spend(row) for row in _summed(rows, "model")}


def daily_spend(
    *, tenant_id: int, start: date, end: date, key_prefix: str | None = None
) -> list[tuple[date, Spend]]:
    """One entry per day of the period, days without usage included (zero)."""
    rows = _rows(tenant_id=tenant_id, start=start, end=end, key_prefix=key_prefix)
    by_day = {row["date"]: _spend(row) for row in _summed(rows, "date")}
    days = (start + timedelta(days=i) for i in range((end - start).days))
    return [(day, by_day.get(day, Spend())) for day in days]


def cost_units_by_tenant(*, tenant_ids: Iterable[int], start: date, end: date) -> dict[int, int]:
    """This period's cost per tenant, for the budget checks of the usage flush."""
    rows = DailyUsage.objects.filter(tenant_id__in=set(tenant_ids), date__gte=start, date__lt=end)
    sums = rows.values("tenant_id").annotate(cost=Sum("cost_units")).order_by()
    return {row["tenant_id"]: row["cost"] or 0 for row in sums}


def cost_units_by_key(
    *, keys: Iterable[tuple[int, str]], start: date, end: date
) -> dict[tuple[int, str], int]:
    """This period's cost per (tenant id, key prefix)."""
    keys = set(keys)
    rows = DailyUsage.objects.filter(
        tenant_id__in={t for t, _ in keys},
        key_prefix__in={p for _, p in keys},
        date__gte=start,
        date__lt=end,
    )
    sums = rows.values("tenant_id", "key_prefix").annotate(cost=Sum("cost_units")).order_by()
    totals = {(row["tenant_id"], row["key_prefix"]): row["cost"] or 0 for row in sums}
    return {k: totals.get(k, 0) for k in keys}


def daily_cost_by_tenant(*, days: int = 14, today: date | None = None) -> dict:
    """For the dashboard: ``{"days": [iso...], "series": {tenant: [cost per day...]}}`` with
    costs as decimal strings (exact), from the daily rollups."""
    today = today or datetime.now(UTC).date()
    start = today - timedelta(days=days - 1)
    rows = (
        DailyUsage.objects.filter(date__gte=start, date__lte=today)
        .values("date", "tenant__name")
        .annotate(cost=Sum("cost_units"))
        .order_by()
    )
    series: dict[str, list[int]] = {}
    for row in rows:
        series.setdefault(row["tenant__name"], [0] * days)[(row["date"] - start).days] += (
            row["cost"] or 0
        )
    return {
        "days": [(start + timedelta(days=i)).isoformat() for i in range(days)],
        "series": {name: [amount_text(u) for u in units] for name, units in series.items()},
    }


def month_spend_by_tenant(*, day: date | None = None) -> list[dict]:
    """For the dashboard: each tenant with spend this month or a spend budget, the largest
    spend first: ``{"tenant", "spent", "budget", "used_percent"}`` (amounts as decimal text,
    ``budget`` and ``used_percent`` None without a budget)."""
    start, end = month_period(day)
    spent = cost_units_by_tenant(
        tenant_ids=Tenant.objects.values_list("pk", flat=True), start=start, end=end
    )
    tenants = Tenant.objects.filter(pk__in=spent) | Tenant.objects.filter(
        monthly_spend_budget__isnull=False
    )
    rows = []
    for tenant in tenants.distinct():
        units, budget = spent.get(tenant.pk, 0), tenant.monthly_spend_budget
        rows.append(
            {
                "tenant": tenant.name,
                "spent": amount_text(units),
                "budget": None if budget is None else str(budget),
                "used_percent": None if budget is None else round(used_percent(units, budget), 1),
                "_units": units,
            }
        )
    rows.sort(key=lambda r: (-r["_units"], r["tenant"]))
    for row in rows:
        del row["_units"]
    return rows
