"""Prices and budget alerts in the admin.

A price in effect is never edited: "Add model price" with a later start is how a price
changes, so usage keeps the price it was recorded at. A price that has not started yet may
still be corrected or deleted. Alerts are a read-only log."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.utils import timezone

from controlplane.billing.models import BudgetAlert, ModelPrice
from controlplane.billing.money import currency, format_amount
from controlplane.billing.services import model_price_check, model_price_set
from controlplane.common.admin_rows import adopt_created_row
from controlplane.common.read_only_admin import ReadOnlyModelAdmin

_PRICES = ("input_per_million", "cached_input_per_million", "output_per_million")


def _started(obj: ModelPrice | None) -> bool:
    return obj is not None and obj.effective_from <= timezone.now()


class ModelPriceForm(forms.ModelForm):
    class Meta:
        model = ModelPrice
        fields = ("model", *_PRICES, "effective_from")

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        try:
            model_price_check(
                model=data.get("model", ""),
                prices={name: data.get(name) for name in _PRICES},
                effective_from=data.get("effective_from") or timezone.now(),
            )
        except ValidationError as exc:
            raise forms.ValidationError(exc.messages) from None
        return data


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    form = ModelPriceForm
    list_display = ("model", *_PRICES, "price_currency", "effective_from", "in_effect")
    list_filter = ("model",)
    search_fields = ("model",)
    date_hierarchy = "effective_from"
    fields = ("model", *_PRICES, "effective_from")

    @admin.display(description="currency")
    def price_currency(self, obj) -> str:
        return currency()

    @admin.display(description="in effect", boolean=True)
    def in_effect(self, obj: ModelPrice) -> bool:
        if not _started(obj):
            return False
        newer = ModelPrice.objects.filter(
            model=obj.model,
            effective_from__gt=obj.effective_from,
            effective_from__lte=timezone.now(),
        )
        return not newer.exists()

    def has_change_permission(self, request, obj=None) -> bool:
        return super().has_change_permission(request, obj) and not _started(obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return super().has_delete_permission(request, obj) and not _started(obj)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        unit = currency()
        for name in _PRICES:
            if name in form.base_fields:
                form.base_fields[name].help_text = f"{unit} per million tokens (up to 4 decimals)"
        if "cached_input_per_million" in form.base_fields:
            form.base_fields[
                "cached_input_per_million"
            ].help_text += "; empty: cached prompt tokens cost the input price"
        return form

    def save_model(self, request, obj, form, change):
        if change:  # a price not in effect yet (the form checked): corrected in place
            super().save_model(request, obj, form, change)
            return
        data = form.cleaned_data
        created = model_price_set(
            model=data["model"],
            effective_from=data.get("effective_from"),
            actor=request.user,
            **{name: data.get(name) for name in _PRICES},
        )
        adopt_created_row(obj, created)


@admin.register(BudgetAlert)
class BudgetAlertAdmin(ReadOnlyModelAdmin):
    list_display = (
        "created_at",
        "tenant",
        "budget_of",
        "period",
        "threshold_percent",
        "spent",
        "budget",
        "webhook_state",
    )
    list_filter = ("tenant", "threshold", "webhook_state")
    date_hierarchy = "created_at"
    list_select_related = ("tenant",)

    @admin.display(description="budget of")
    def budget_of(self, obj: BudgetAlert) -> str:
        return obj.budget_of

    @admin.display(description="threshold", ordering="threshold")
    def threshold_percent(self, obj: BudgetAlert) -> str:
        return f"{obj.threshold}%"

    @admin.display(description="spent then", ordering="spent_units")
    def spent(self, obj: BudgetAlert) -> str:
        return format_amount(obj.spent_units)
