"""Usage in the admin: read-only lists of records and daily rollups."""

from django.contrib import admin

from controlplane.usage.models import DailyUsage, UsageRecord


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(UsageRecord)
class UsageRecordAdmin(_ReadOnly):
    list_display = (
        "created_at",
        "tenant",
        "key_prefix",
        "model",
        "adapter",
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
        "latency",
        "status",
    )
    list_filter = ("tenant", "model", "status")
    date_hierarchy = "created_at"
    list_select_related = ("tenant",)


@admin.register(DailyUsage)
class DailyUsageAdmin(_ReadOnly):
    list_display = (
        "date",
        "tenant",
        "key_prefix",
        "model",
        "adapter",
        "num_requests",
        "num_errors",
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
    )
    list_filter = ("tenant", "model")
    date_hierarchy = "date"
    list_select_related = ("tenant",)
