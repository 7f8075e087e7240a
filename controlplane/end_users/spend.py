"""Each end user's spend per month, rolled up by the usage flush; admission reads it through the
Redis counters the flush publishes, the pages through selectors.py. Crossing an alert
threshold of an end user's budget fires a budget alert, as a tenant's or a key's does."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import date
from decimal import Decimal
from typing import Any

from controlplane.billing.services import budget_alerts_fire
from controlplane.billing.spend_counters import end_user_spend_key, month_tag
from controlplane.end_users.models import EndUser, EndUserMonthlySpend
from controlplane.tenants.models import Tenant

_SUMMED = (
    "num_requests",
    "num_errors",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "cost_units",
)


def end_user_spend_add(records: Sequence[Any]) -> dict[str, int]:
    """Add usage records (UsageRecord rows just written) to their end users' months; returns
    the Redis spend counters to publish once the transaction commits (name -> month total).

    Call inside the transaction that wrote ``records``: the usage flush writes each record
    exactly once, so each is added exactly once. Records without an end user are skipped.
    """
    totals: dict[tuple[int, str, date], list[int]] = defaultdict(lambda: [0] * len(_SUMMED))
    for r in records:
        if not r.end_user:
            continue
        t = totals[(r.tenant_id, r.end_user, r.created_at.date().replace(day=1))]
        for i, value in enumerate(
            (
                1,
                int(r.status >= 400),
                r.prompt_tokens,
                r.completion_tokens,
                r.cached_tokens,
                r.cost_units,
            )
        ):
            t[i] += value
    if not totals:
        return {}
    counters: dict[str, int] = {}
    budgets = _Budgets({(tenant_id, name) for tenant_id, name, _ in totals})
    for (tenant_id, name, period), t in totals.items():
        # Locked, so the totals read here are the ones written (one flusher runs at a time;
        # the lock keeps that true for anything else that writes these rows).
        row, _ = EndUserMonthlySpend.objects.select_for_update().get_or_create(
            tenant_id=tenant_id, end_user=name, period=period
        )
        for field, added in zip(_SUMMED, t, strict=True):
            setattr(row, field, getattr(row, field) + added)
        row.save(update_fields=list(_SUMMED))
        counters[end_user_spend_key(tenant_id, name, month_tag(period))] = row.cost_units
        budget = budgets.of(tenant_id, name)
        if budget is not None:
            budget_alerts_fire(
                tenant=budgets.tenants[tenant_id],
                end_user=name,
                period=period,
                spent_units=row.cost_units,
                budget=budget,
            )
    return counters


class _Budgets:
    """The monthly budget of each end user of a batch: their own, else their tenant's budget
    per end user (two queries for the batch)."""

    def __init__(self, end_users: set[tuple[int, str]]):
        tenant_ids = {tenant_id for tenant_id, _ in end_users}
        self.tenants = Tenant.objects.in_bulk(tenant_ids)
        rows = EndUser.objects.filter(
            tenant_id__in=tenant_ids,
            name__in={name for _, name in end_users},
            monthly_spend_budget__isnull=False,
        ).values_list("tenant_id", "name", "monthly_spend_budget")
        self._own = {(tenant_id, name): budget for tenant_id, name, budget in rows}

    def of(self, tenant_id: int, name: str) -> Decimal | None:
        own = self._own.get((tenant_id, name))
        if own is not None:
            return own
        tenant = self.tenants.get(tenant_id)
        return tenant.end_user_monthly_spend_budget if tenant else None
