"""Each end user's spend per month, rolled up by the usage flush; admission reads it through the
Redis counters the flush publishes, the pages through selectors.py."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import date
from typing import Any

from controlplane.billing.spend_counters import end_user_spend_key, month_tag
from controlplane.end_users.models import EndUserMonthlySpend

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
    counters: dict[str, int] = {}
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
    return counters
