"""Usage in the admin: read-only lists of records and daily rollups.

Token counts share one column (prompt, completion, cached: one line each), errors are shown
under requests and an adapter under its base model, so rows of ten facts fit a 1280 px window
beside the filters."""

from django.contrib import admin
from django.utils.html import format_html, format_html_join

from controlplane.usage.models import DailyUsage, UsageRecord


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

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
        return format_html_join(format_html("<br>"), "{} {}", counts)


@admin.register(UsageRecord)
class UsageRecordAdmin(_ReadOnly):
    list_display = (
        "created_at",
        "tenant",
        "key_prefix",
        "model_and_adapter",
        "tokens",
        "latency_seconds",
        "status",
    )
    list_filter = ("tenant", "model", "status")
    date_hierarchy = "created_at"
    list_select_related = ("tenant",)

    @admin.display(description="latency", ordering="latency")
    def latency_seconds(self, obj: UsageRecord) -> str:
        return f"{obj.latency:.2f} s"


@admin.register(DailyUsage)
class DailyUsageAdmin(_ReadOnly):
    list_display = (
        "date",
        "tenant",
        "key_prefix",
        "model_and_adapter",
        "request_counts",
        "tokens",
    )
    list_filter = ("tenant", "model")
    date_hierarchy = "date"
    list_select_related = ("tenant",)

    @admin.display(description="requests", ordering="num_requests")
    def request_counts(self, obj: DailyUsage):
        return format_html("{}<br>{} errors", obj.num_requests, obj.num_errors)
