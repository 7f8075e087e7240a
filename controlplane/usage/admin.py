"""Usage in the admin: read-only lists of records and daily rollups, with their cost.

They are billing data: nobody adds, changes or deletes them here (no delete action either).
Both lists filter by tenant, key and model, and export what is selected as CSV; the export
view (``export/`` under the records) takes a period instead. Token counts share one column
(prompt, completion, cached: one line each), errors are shown under requests and an adapter
under its base model, so rows fit a 1280 px window beside the filters."""

from __future__ import annotations

from datetime import date, timedelta

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseBadRequest
from django.urls import path
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from controlplane.billing.money import format_amount
from controlplane.common.read_only_admin import ReadOnlyModelAdmin
from controlplane.usage.csv_export import daily_usage_csv, usage_records_csv
from controlplane.usage.models import DailyUsage, UsageRecord


class _BillingData(ReadOnlyModelAdmin):
    """Read-only: shown, filtered and exported, never added, changed or deleted."""

    @admin.display(description="tenant / key", ordering="tenant__name")
    def tenant_and_key(self, obj):
        return format_html("{}<br><code>{}</code>", obj.tenant, obj.key_prefix or "(session)")

    @admin.display(description="model", ordering="model")
    def model_and_adapter(self, obj):
        if not obj.adapter:
            return obj.model
        return format_html("{}<br>+ LoRA {}", obj.model, obj.adapter)

    @admin.display(description="tokens", ordering="prompt_tokens")
    def tokens(self, obj):
        counts = (
            (obj.prompt_tokens, "prompt"),
            (obj.completion_tokens, "completion"),
            (obj.cached_tokens, "cached"),
        )
        return format_html_join(mark_safe("<br>"), "{} {}", counts)

    @admin.display(description="cost", ordering="cost_units")
    def cost(self, obj) -> str:
        return format_amount(obj.cost_units, places=6)


@admin.register(UsageRecord)
class UsageRecordAdmin(_BillingData):
    list_display = (
        "created_at",
        "tenant_and_key",
        "model_and_adapter",
        "tokens",
        "cost",
        "latency_seconds",
        "status",
    )
    list_filter = ("tenant", "key_prefix", "model", "status")
    # A request id (the answer's id a client quotes) or an end user (the request's user).
    search_fields = ("request_id", "end_user")
    date_hierarchy = "created_at"
    list_select_related = ("tenant",)
    actions = ["export_csv"]

    @admin.display(description="latency", ordering="latency")
    def latency_seconds(self, obj: UsageRecord) -> str:
        return f"{obj.latency:.2f} s"

    @admin.action(description="Export selected usage records as CSV")
    def export_csv(self, request, queryset):
        return usage_records_csv(queryset)

    def get_urls(self):
        export = self.admin_site.admin_view(self.export_period_view)
        return [path("export/", export, name="usage_export"), *super().get_urls()]

    def export_period_view(self, request: HttpRequest):
        """``?kind=records|daily&start=YYYY-MM-DD&end=YYYY-MM-DD`` (end included), optionally
        ``&tenant=ID&key=PREFIX&model=NAME``: a period's usage as CSV, for staff who may view
        usage."""
        kind = request.GET.get("kind", "records")
        if kind not in ("records", "daily"):
            return HttpResponseBadRequest("kind is records or daily")
        model = UsageRecord if kind == "records" else DailyUsage
        if not request.user.has_perm(f"usage.view_{model._meta.model_name}"):
            raise PermissionDenied
        try:
            start = date.fromisoformat(request.GET["start"])
            end = date.fromisoformat(request.GET["end"])
        except (KeyError, ValueError):
            return HttpResponseBadRequest("start and end are dates: YYYY-MM-DD")
        filters = {
            name: request.GET[param]
            for param, name in (("tenant", "tenant_id"), ("key", "key_prefix"), ("model", "model"))
            if request.GET.get(param)
        }
        filename = f"usage-{kind}-{start}-{end}.csv"
        if kind == "records":
            rows = UsageRecord.objects.filter(
                created_at__date__gte=start, created_at__date__lte=end, **filters
            )
            return usage_records_csv(rows, filename=filename)
        rows = DailyUsage.objects.filter(
            date__gte=start, date__lt=end + timedelta(days=1), **filters
        )
        return daily_usage_csv(rows, filename=filename)


@admin.register(DailyUsage)
class DailyUsageAdmin(_BillingData):
    list_display = (
        "date",
        "tenant",
        "key_prefix",
        "model_and_adapter",
        "request_counts",
        "tokens",
        "cost",
    )
    list_filter = ("tenant", "key_prefix", "model")
    date_hierarchy = "date"
    list_select_related = ("tenant",)
    actions = ["export_csv"]

    @admin.display(description="requests", ordering="num_requests")
    def request_counts(self, obj: DailyUsage):
        return format_html("{}<br>{} errors", obj.num_requests, obj.num_errors)

    @admin.action(description="Export selected daily usage as CSV")
    def export_csv(self, request, queryset):
        return daily_usage_csv(queryset)
