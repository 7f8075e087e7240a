"""End users in the admin: the controls set on some (editable, written through the services so
they reach admission at once), and every end user's spend per month (read-only)."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Sum

from controlplane.billing.money import format_amount
from controlplane.common.admin_rows import adopt_created_row
from controlplane.common.read_only_admin import ReadOnlyModelAdmin
from controlplane.end_users.models import EndUser, EndUserMonthlySpend
from controlplane.end_users.selectors import this_month
from controlplane.end_users.services import end_user_remove_controls, end_user_set_controls

_CONTROLS = ("monthly_spend_budget", "blocked", "note")


def _this_month_units(end_user: EndUser) -> int:
    period = this_month()
    return (
        EndUserMonthlySpend.objects.filter(
            tenant_id=end_user.tenant_id, end_user=end_user.name, period=period
        ).aggregate(units=Sum("cost_units"))["units"]
        or 0
    )


@admin.register(EndUser)
class EndUserAdmin(admin.ModelAdmin):
    list_display = ("name", "tenant", "monthly_spend_budget", "blocked", "spent_this_month")
    list_filter = ("blocked", "tenant")
    search_fields = ("name", "tenant__name", "tenant__slug")
    list_select_related = ("tenant",)
    readonly_fields = ("spent_this_month", "created_at", "updated_at")

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("tenant", "name", *_CONTROLS)
        return ("tenant", "name", *_CONTROLS, "spent_this_month", "created_at", "updated_at")

    def get_readonly_fields(self, request, obj=None):
        # An end user's name and tenant are what admission matches: changing them would be
        # another end user, so that is a new row.
        if obj is None:
            return ()
        return ("tenant", "name", *self.readonly_fields)

    @admin.display(description="spent this month")
    def spent_this_month(self, obj: EndUser) -> str:
        return format_amount(_this_month_units(obj)) if obj.pk else "-"

    def save_model(self, request, obj, form, change):
        saved = end_user_set_controls(
            tenant=obj.tenant,
            name=obj.name,
            monthly_spend_budget=form.cleaned_data.get("monthly_spend_budget"),
            blocked=form.cleaned_data.get("blocked", False),
            note=form.cleaned_data.get("note", ""),
            actor=request.user,
        )
        adopt_created_row(obj, saved)

    def delete_model(self, request, obj):
        end_user_remove_controls(end_user=obj, actor=request.user)

    def delete_queryset(self, request, queryset):
        for end_user in queryset.select_related("tenant"):
            end_user_remove_controls(end_user=end_user, actor=request.user)


@admin.register(EndUserMonthlySpend)
class EndUserMonthlySpendAdmin(ReadOnlyModelAdmin):
    list_display = (
        "end_user",
        "tenant",
        "month",
        "num_requests",
        "prompt_tokens",
        "completion_tokens",
        "spent",
    )
    list_filter = ("tenant", "period")
    search_fields = ("end_user", "tenant__name")
    list_select_related = ("tenant",)

    @admin.display(description="month", ordering="period")
    def month(self, obj: EndUserMonthlySpend) -> str:
        return f"{obj.period:%Y-%m}"

    @admin.display(description="spent", ordering="cost_units")
    def spent(self, obj: EndUserMonthlySpend) -> str:
        return format_amount(obj.cost_units)
