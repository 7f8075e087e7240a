"""Reads for the tenant portal. Every read takes the signed-in person's tenant: nothing of
another tenant can be reached through these, whatever ids a URL carries."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from django.db.models import Count, Q, QuerySet, Sum
from django.shortcuts import get_object_or_404

from controlplane.billing.costs import request_cost_units
from controlplane.billing.money import format_amount
from controlplane.billing.selectors import price_book
from controlplane.chat_store.models import StoredChatCompletion
from controlplane.portal.models import IdentityProvider, TenantMembership
from controlplane.responses.models import StoredResponse
from controlplane.tenants.models import ApiKey, Tenant
from controlplane.usage.models import DailyUsage, UsageRecord
from controlplane.usage.selectors import pending_usage_events
from engine.redis_outage import warn_failure

logger = logging.getLogger(__name__)


def membership_for_user(*, user) -> TenantMembership | None:
    """The active user's membership of an active tenant, else None."""
    if not user.is_authenticated or not user.is_active:
        return None
    return (
        TenantMembership.objects.select_related("tenant")
        .filter(user=user, tenant__is_active=True)
        .first()
    )


def tenant_members(*, tenant: Tenant) -> QuerySet[TenantMembership]:
    return TenantMembership.objects.select_related("user").filter(tenant=tenant)


def tenant_member_get(*, tenant: Tenant, pk: int) -> TenantMembership:
    """The tenant's member with this id; 404 for another tenant's."""
    return get_object_or_404(tenant_members(tenant=tenant), pk=pk)


def tenant_keys(*, tenant: Tenant) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(tenant=tenant).order_by("revoked_at", "-created_at")


def tenant_key_get(*, tenant: Tenant, pk: int) -> ApiKey:
    """The tenant's key with this id; 404 for another tenant's (no hint that it exists)."""
    return get_object_or_404(ApiKey, tenant=tenant, pk=pk)


def tenant_num_active_keys(*, tenant: Tenant) -> int:
    return ApiKey.objects.filter(tenant=tenant, revoked_at__isnull=True).count()


def tenant_responses(*, tenant: Tenant) -> QuerySet[StoredResponse]:
    return StoredResponse.objects.filter(tenant=tenant).defer("input_items", "response")


def tenant_response_get(*, tenant: Tenant, response_id: str) -> StoredResponse:
    return get_object_or_404(StoredResponse, tenant=tenant, pk=response_id)


def tenant_chat_completions(*, tenant: Tenant) -> QuerySet[StoredChatCompletion]:
    return (
        StoredChatCompletion.objects.filter(tenant=tenant)
        .order_by("-created_at", "-id")
        .defer("messages", "completion")
    )


def tenant_chat_completion_get(*, tenant: Tenant, completion_id: str) -> StoredChatCompletion:
    return get_object_or_404(StoredChatCompletion, tenant=tenant, pk=completion_id)


def chat_answers(stored: StoredChatCompletion) -> list[dict]:
    """Each choice of a stored completion as a person reads it: its text, the calls it made
    (name and arguments), and why it ended."""
    answers = []
    for choice in stored.completion.get("choices") or ():
        message = choice.get("message") or {}
        calls = [
            f"{call['function']['name']}({call['function']['arguments']})"
            for call in message.get("tool_calls") or ()
            if isinstance(call, dict) and isinstance(call.get("function"), dict)
        ]
        answers.append(
            {
                "content": message.get("content") or "",
                "reasoning": message.get("reasoning_content") or "",
                "calls": calls,
                "finish_reason": choice.get("finish_reason"),
            }
        )
    return answers


def response_output_text(response: StoredResponse) -> str:
    """The text of a stored response's message outputs, as a person reads it."""
    parts = []
    for item in response.response.get("output") or ():
        for content in item.get("content") or () if isinstance(item, dict) else ():
            if isinstance(content, dict) and content.get("type") == "output_text":
                parts.append(content.get("text", ""))
    return "\n".join(parts)


@dataclass
class UsageTotals:
    """Requests and tokens of one group (a day, a key or a model)."""

    label: str
    num_requests: int = 0
    num_errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_units: int = 0  # exact (controlplane/billing/money.py)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def cost(self) -> str:
        return format_amount(self.cost_units)

    def add(self, row: dict) -> None:
        self.num_requests += row["num_requests"]
        self.num_errors += row["num_errors"]
        self.prompt_tokens += row["prompt_tokens"]
        self.completion_tokens += row["completion_tokens"]
        self.cached_tokens += row["cached_tokens"]
        self.cost_units += row["cost_units"]


@dataclass
class TenantUsage:
    """The portal's usage page: totals per day (newest first), per key and per model."""

    since: date
    total: UsageTotals
    by_day: list[UsageTotals] = field(default_factory=list)
    by_key: list[UsageTotals] = field(default_factory=list)
    by_model: list[UsageTotals] = field(default_factory=list)
    # The end users the tenant's requests named (their ``user``), most tokens first.
    by_end_user: list[UsageTotals] = field(default_factory=list)


MAX_END_USERS = 50  # listed on the page; the CSV export has every record


_GROUP_FIELDS = ("date", "key_prefix", "model", "adapter")


def _rolled_up_rows(tenant: Tenant, since: date) -> list[dict]:
    return list(
        DailyUsage.objects.filter(tenant=tenant, date__gte=since)
        .values(*_GROUP_FIELDS)
        .annotate(
            num_requests=Sum("num_requests"),
            num_errors=Sum("num_errors"),
            prompt_tokens=Sum("prompt_tokens"),
            completion_tokens=Sum("completion_tokens"),
            cached_tokens=Sum("cached_tokens"),
            cost_units=Sum("cost_units"),
        )
    )


def _pending_rows(tenant: Tenant, since: date) -> list[dict]:
    """The tenant's usage still queued in Redis (not flushed yet), as rollup rows: the page is
    current without waiting for the periodic flush. Redis away: only what the database holds."""
    try:
        pending = pending_usage_events()
    except Exception as exc:
        warn_failure(logger, exc, "queued usage unavailable to the portal")
        return []
    rows = []
    mine = [event for event in pending if event.tenant_id == tenant.pk]
    # Priced as the flush will price them: at the model's price when the request finished.
    prices = price_book(models={event.model for event in mine})
    for event in mine:
        finished = datetime.fromtimestamp(event.finished_at, tz=UTC)
        day = finished.date()
        if day < since:
            continue
        rows.append(
            {
                "date": day,
                "end_user": event.end_user,
                "key_prefix": event.key_prefix,
                "model": event.model,
                "adapter": event.adapter,
                "num_requests": 1,
                "num_errors": int(event.status >= 400),
                "prompt_tokens": max(0, event.prompt_tokens),
                "completion_tokens": max(0, event.completion_tokens),
                "cached_tokens": max(0, event.cached_tokens),
                "cost_units": request_cost_units(
                    prices.at(event.model, finished),
                    prompt_tokens=event.prompt_tokens,
                    completion_tokens=event.completion_tokens,
                    cached_tokens=event.cached_tokens,
                ),
            }
        )
    return rows


def _end_user_rows(tenant: Tenant, since: date) -> list[dict]:
    """The flushed usage per end user since ``since`` (records, not rollups: the daily
    rollups do not split by end user)."""
    start = datetime.combine(since, datetime.min.time(), tzinfo=UTC)
    return list(
        UsageRecord.objects.filter(tenant=tenant, created_at__gte=start)
        .exclude(end_user="")
        .values("end_user")
        .annotate(
            num_requests=Count("id"),
            num_errors=Count("id", filter=Q(status__gte=400)),
            prompt_tokens=Sum("prompt_tokens"),
            completion_tokens=Sum("completion_tokens"),
            cached_tokens=Sum("cached_tokens"),
            cost_units=Sum("cost_units"),
        )
    )


def _grouped(rows: list[dict], label) -> list[UsageTotals]:
    groups: dict[str, UsageTotals] = {}
    for row in rows:
        name = label(row)
        groups.setdefault(name, UsageTotals(label=name)).add(row)
    return list(groups.values())


def _model_label(row: dict) -> str:
    return f"{row['model']} ({row['adapter']})" if row["adapter"] else row["model"]


def tenant_usage(*, tenant: Tenant, days: int = 30, today: date | None = None) -> TenantUsage:
    """Requests, tokens and cost of the last ``days`` UTC days: daily rollups plus queued
    usage (priced at the price in effect when each request finished)."""
    today = today or datetime.now(UTC).date()
    since = today - timedelta(days=days - 1)
    pending = _pending_rows(tenant, since)
    rows = _rolled_up_rows(tenant, since) + pending
    end_users = _end_user_rows(tenant, since) + [row for row in pending if row["end_user"]]
    by_end_user = sorted(
        _grouped(end_users, lambda r: r["end_user"]), key=lambda t: -t.total_tokens
    )
    total = UsageTotals(label="total")
    for row in rows:
        total.add(row)
    by_day = sorted(_grouped(rows, lambda r: r["date"].isoformat()), key=lambda t: t.label)
    return TenantUsage(
        since=since,
        total=total,
        by_day=by_day[::-1],
        by_key=sorted(_grouped(rows, lambda r: r["key_prefix"]), key=lambda t: -t.total_tokens),
        by_model=sorted(_grouped(rows, _model_label), key=lambda t: -t.total_tokens),
        by_end_user=by_end_user[:MAX_END_USERS],
    )


def identity_provider_for_email(*, email: str) -> IdentityProvider | None:
    """The active provider whose email domains hold this address's domain."""
    domain = email.rpartition("@")[2].strip().lower()
    if not domain:
        return None
    for provider in IdentityProvider.objects.filter(is_active=True, tenant__is_active=True):
        if domain in provider.domains:
            return provider
    return None


def identity_provider_get(*, pk: int) -> IdentityProvider:
    return get_object_or_404(
        IdentityProvider.objects.select_related("tenant"), pk=pk, is_active=True
    )
