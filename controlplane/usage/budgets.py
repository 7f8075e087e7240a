"""Monthly spend budgets, checked by the usage flush after each write.

For every tenant and key in the batch it reads the month's spend from the daily rollups
(two grouped queries), adds the records to their end users' months (end_users/spend.py),
mirrors it all into Redis for admission (billing/spend_counters.py) once
the write has committed, and fires each alert threshold of a budget the spend has reached
(once per budget and month: billing's ``budget_alert_fire``).
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from controlplane.billing.services import budget_alerts_fire
from controlplane.billing.spend_counters import (
    COUNTER_TTL_S,
    key_spend_key,
    month_tag,
    tenant_spend_key,
)
from controlplane.common.redis_clients import sync_redis
from controlplane.end_users.spend import end_user_spend_add
from controlplane.tenants.models import ApiKey, Tenant
from controlplane.usage.models import UsageRecord
from controlplane.usage.spend import cost_units_by_key, cost_units_by_tenant, month_period


def _publish(counters: dict[str, int]) -> None:
    pipe = sync_redis().pipeline(transaction=False)
    for name, units in counters.items():
        pipe.set(name, units, ex=COUNTER_TTL_S)
    pipe.execute()


def spend_after_write(records: Sequence[UsageRecord]) -> None:
    """Call inside the transaction that wrote ``records`` and their rollups."""
    counters = end_user_spend_add(records)
    for start, end in {month_period(r.created_at.date()) for r in records}:
        month = [r for r in records if start <= r.created_at.date() < end]
        tag = month_tag(start)
        by_tenant = cost_units_by_tenant(
            tenant_ids={r.tenant_id for r in month}, start=start, end=end
        )
        by_key = cost_units_by_key(
            keys={(r.tenant_id, r.key_prefix) for r in month}, start=start, end=end
        )
        for tenant_id, units in by_tenant.items():
            counters[tenant_spend_key(tenant_id, tag)] = units
        for (tenant_id, prefix), units in by_key.items():
            counters[key_spend_key(tenant_id, prefix, tag)] = units
        budgeted = Tenant.objects.filter(pk__in=by_tenant, monthly_spend_budget__isnull=False)
        for tenant in budgeted:
            budget_alerts_fire(
                tenant=tenant,
                period=start,
                spent_units=by_tenant[tenant.pk],
                budget=tenant.monthly_spend_budget,
            )
        keys = ApiKey.objects.select_related("tenant").filter(
            prefix__in={p for _, p in by_key}, monthly_spend_budget__isnull=False
        )
        for key in keys:
            budget_alerts_fire(
                tenant=key.tenant,
                key_prefix=key.prefix,
                period=start,
                spent_units=by_key.get((key.tenant_id, key.prefix), 0),
                budget=key.monthly_spend_budget,
            )
    if counters:
        transaction.on_commit(lambda: _publish(counters))
