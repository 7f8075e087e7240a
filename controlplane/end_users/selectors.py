"""Reads on end users, each for one tenant: this month's spend with the controls that apply."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404

from controlplane.billing.money import amount_to_units, format_amount
from controlplane.end_users.models import EndUser, EndUserMonthlySpend
from controlplane.tenants.models import Tenant


def this_month() -> date:
    return datetime.now(UTC).date().replace(day=1)


@dataclass(frozen=True, slots=True)
class EndUserMonth:
    """One end user's month: what they spent and the budget that applies to them."""

    name: str
    num_requests: int
    total_tokens: int
    cost_units: int
    budget: Decimal | None  # their own, else the tenant's budget per end user
    own_budget: bool
    blocked: bool

    @property
    def spent(self) -> str:
        return format_amount(self.cost_units)

    @property
    def over_budget(self) -> bool:
        return self.budget is not None and self.cost_units >= amount_to_units(self.budget)


def end_user_controls(*, tenant: Tenant) -> QuerySet[EndUser]:
    return EndUser.objects.filter(tenant=tenant).order_by("name")


def end_user_get(*, tenant: Tenant, pk: int) -> EndUser:
    return get_object_or_404(EndUser, tenant=tenant, pk=pk)


def end_users_of_month(
    *, tenant: Tenant, period: date | None = None, query: str = "", limit: int = 100
) -> list[EndUserMonth]:
    """The tenant's end users with spend in the month starting ``period`` (this month when
    None), most spent first; ``query``: only names holding it."""
    spends = EndUserMonthlySpend.objects.filter(tenant=tenant, period=period or this_month())
    if query:
        spends = spends.filter(end_user__icontains=query)
    spends = list(spends.order_by("-cost_units", "-num_requests", "end_user")[:limit])
    controls = {
        c.name: c
        for c in EndUser.objects.filter(tenant=tenant, name__in=[s.end_user for s in spends])
    }
    rows = []
    for spend in spends:
        control = controls.get(spend.end_user)
        own = control is not None and control.monthly_spend_budget is not None
        rows.append(
            EndUserMonth(
                name=spend.end_user,
                num_requests=spend.num_requests,
                total_tokens=spend.total_tokens,
                cost_units=spend.cost_units,
                budget=control.monthly_spend_budget
                if own
                else tenant.end_user_monthly_spend_budget,
                own_budget=own,
                blocked=control is not None and control.blocked,
            )
        )
    return rows


@dataclass(frozen=True, slots=True)
class EndUserState:
    """One end user as the API shows them: their controls, this month's spend, and the
    budget that applies (their own, else the tenant's budget per end user)."""

    name: str
    controls: EndUser | None
    spend: EndUserMonthlySpend | None
    tenant_budget: Decimal | None

    @property
    def budget(self) -> Decimal | None:
        own = self.controls.monthly_spend_budget if self.controls else None
        return own if own is not None else self.tenant_budget


def end_user_state(*, tenant: Tenant, name: str) -> EndUserState:
    return EndUserState(
        name=name,
        controls=EndUser.objects.filter(tenant=tenant, name=name).first(),
        spend=EndUserMonthlySpend.objects.filter(
            tenant=tenant, end_user=name, period=this_month()
        ).first(),
        tenant_budget=tenant.end_user_monthly_spend_budget,
    )


def end_user_states(
    *, tenant: Tenant, after: str | None, limit: int, ascending: bool
) -> list[EndUserState]:
    """A page of the end users with controls, by name; one more than ``limit`` when there is
    a next page."""
    rows = EndUser.objects.filter(tenant=tenant)
    if after is not None:
        rows = rows.filter(name__gt=after) if ascending else rows.filter(name__lt=after)
    rows = list(rows.order_by("name" if ascending else "-name")[: limit + 1])
    spends = {
        s.end_user: s
        for s in EndUserMonthlySpend.objects.filter(
            tenant=tenant, period=this_month(), end_user__in=[r.name for r in rows]
        )
    }
    return [
        EndUserState(
            name=r.name,
            controls=r,
            spend=spends.get(r.name),
            tenant_budget=tenant.end_user_monthly_spend_budget,
        )
        for r in rows
    ]
