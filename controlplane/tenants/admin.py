"""Tenants and API keys in the Django admin. Every write goes through the services, so the
admin, the commands and the API share one set of rules, one audit log and one cache epoch."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db import models
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.timezone import localtime

from controlplane.common.admin_rows import adopt_created_row
from controlplane.tenants.forms import ApiKeyCreateForm
from controlplane.tenants.models import ApiKey, Tenant
from controlplane.tenants.selectors import tenant_get_by_pk
from controlplane.tenants.services import (
    RETENTION_FIELDS,
    SHARE_FIELDS,
    api_key_create,
    api_key_revoke,
    api_key_set_spend_budget,
    tenant_create,
    tenant_rotate_cache_salt,
    tenant_set_allowed_models,
    tenant_update,
)
from controlplane.tenants.spend_columns import key_spend_used, tenant_spend_used

_LIMITS = (
    "requests_per_minute",
    "tokens_per_minute",
    "max_concurrent_requests",
    "monthly_token_budget",
)
_BUDGETS = ("monthly_spend_budget", "end_user_monthly_spend_budget", "budget_alert_webhook_url")
_SPEND_HELP = (
    "In the billing currency, per calendar month (UTC), at the model prices of Billing ‣ "
    "Model prices. Requests are refused (429) once the month's spend reaches the budget; "
    "alerts (audit log, and the webhook when set) fire at BUDGET_ALERT_THRESHOLDS percent."
)


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    fields = ("prefix_link", "name", "scopes", "created_at", "expires_at", "revoked_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False

    @admin.display(description="prefix")
    def prefix_link(self, obj: ApiKey):
        return format_html(
            '<a href="../../apikey/{}/change/"><code>{}…</code></a>', obj.pk, obj.prefix
        )

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    # Limits and fair share one column each: eleven columns would not fit a 1280 px window.
    list_display = ("name", "slug", "is_active", "limits", "share", "spend_used", "num_keys")
    list_filter = ("is_active", "service_class")
    search_fields = ("name", "slug")
    readonly_fields = ("slug", "cache_salt_rotated_at", "created_at", "spend_this_month")
    filter_horizontal = ("allowed_models",)
    fieldsets = (
        (None, {"fields": ("name", "slug", "is_active", "created_at")}),
        ("Limits (empty: unlimited)", {"fields": _LIMITS}),
        (
            "Fair share in the engines",
            {
                "fields": SHARE_FIELDS,
                "description": "While tenants compete for an engine, each gets tokens in "
                "proportion to its weight; interactive requests go before batch ones (Batch API "
                "lines are always batch).",
            },
        ),
        (
            "Spend (empty budget: none)",
            {
                "fields": (
                    "monthly_spend_budget",
                    "spend_this_month",
                    "end_user_monthly_spend_budget",
                    "budget_alert_webhook_url",
                ),
                "description": "The budget per end user applies to each end user the requests "
                "name (user, safety_identifier) without a budget of their own (End users).",
            },
        ),
        (
            "Grants",
            {
                "fields": ("allowed_models",),
                "description": "No model selected: the tenant may use every served model.",
            },
        ),
        (
            "Data retention",
            {
                "fields": RETENTION_FIELDS,
                "description": "Zero data retention: the platform keeps no request or answer "
                "of this tenant (stored responses, stored chat completions, conversations).",
            },
        ),
        ("Prefix-cache isolation", {"fields": ("cache_salt_rotated_at",)}),
    )
    inlines = [ApiKeyInline]
    actions = ["rotate_cache_salt", "deactivate"]
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    @admin.display(description="limits")
    def limits(self, obj: Tenant):
        parts = [
            f"{value:,} {unit}"
            for value, unit in (
                (obj.requests_per_minute, "req/min"),
                (obj.tokens_per_minute, "tokens/min"),
                (obj.max_concurrent_requests, "concurrent"),
                (obj.monthly_token_budget, "tokens/month"),
            )
            if value is not None
        ]
        return format_html_join(mark_safe("<br>"), "{}", ((part,) for part in parts)) or "none"

    @admin.display(description="fair share", ordering="share_weight")
    def share(self, obj: Tenant) -> str:
        return f"weight {obj.share_weight}, {obj.service_class}"

    @admin.display(description="keys")
    def num_keys(self, obj: Tenant) -> int:
        return obj.api_keys.filter(revoked_at__isnull=True).count()

    @admin.display(description="spend this month")
    def spend_this_month(self, obj: Tenant):
        return tenant_spend_used(obj) if obj.pk else "-"

    @admin.display(description="spend this month")
    def spend_used(self, obj: Tenant):
        return tenant_spend_used(obj, compact=True)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        if "monthly_spend_budget" in form.base_fields:
            form.base_fields["monthly_spend_budget"].help_text = _SPEND_HELP
        return form

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        if not change:
            created = tenant_create(
                name=data["name"],
                actor=request.user,
                **{k: data.get(k) for k in (*_LIMITS, *_BUDGETS)},
                **{k: data[k] for k in SHARE_FIELDS if k in data},
                **{k: data[k] for k in RETENTION_FIELDS if k in data},
            )
            if not data.get("is_active", True):
                tenant_update(tenant=created, is_active=False, actor=request.user)
            adopt_created_row(obj, created)
            return
        editable = {"name", "is_active", *_LIMITS, *SHARE_FIELDS, *_BUDGETS, *RETENTION_FIELDS}
        fields = [f for f in form.changed_data if f in editable]
        if fields:
            current = tenant_get_by_pk(pk=obj.pk)
            tenant_update(tenant=current, actor=request.user, **{f: data[f] for f in fields})

    def save_related(self, request, form, formsets, change):
        if not change or "allowed_models" in form.changed_data:
            names = [m.name for m in form.cleaned_data.get("allowed_models", [])]
            if change or names:
                tenant_set_allowed_models(
                    tenant=form.instance, model_names=names, actor=request.user
                )
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)

    @admin.action(description="Rotate the prefix-cache salt")
    def rotate_cache_salt(self, request, queryset):
        for tenant in queryset:
            tenant_rotate_cache_salt(tenant=tenant, actor=request.user)
        self.message_user(request, f"Rotated the cache salt of {len(queryset)} tenant(s).")

    @admin.action(description="Deactivate (their keys stop working)")
    def deactivate(self, request, queryset):
        for tenant in queryset:
            tenant_update(tenant=tenant, is_active=False, actor=request.user)
        self.message_user(request, f"Deactivated {len(queryset)} tenant(s).")

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # deactivate instead: usage and the audit trail keep pointing at it


def scope_label(scopes: list[str]) -> str:
    """How a key's scopes read everywhere in the admin: an empty list allows every endpoint."""
    return ", ".join(scopes) or "all endpoints"


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Keys are immutable: created once (the secret shown once), then only revoked, on a
    confirmation page reached from the key's page or the list's action."""

    list_display = (
        "prefix",
        "name",
        "tenant",
        "scope_list",
        "lifetime",
        "last_used_at",
        "spend_used",
    )
    list_filter = ("tenant", ("revoked_at", admin.EmptyFieldListFilter))
    search_fields = ("prefix", "name", "tenant__name")
    list_select_related = ("tenant",)
    actions = ["revoke"]
    readonly_fields = (
        "prefix",
        "tenant",
        "name",
        "scope_list",
        "expires_at",
        "created_at",
        "revoked_at",
        "last_used_at",
    )

    @admin.display(description="scopes")
    def scope_list(self, obj: ApiKey) -> str:
        return scope_label(obj.scopes)

    @admin.display(description="created / expires / revoked", ordering="created_at")
    def lifetime(self, obj: ApiKey):
        """Three dates in one column, so the list fits a 1280 px window."""
        lines = [("created", obj.created_at), ("expires", obj.expires_at)]
        lines.append(("revoked", obj.revoked_at))
        return format_html_join(
            mark_safe("<br>"),
            "{} {}",
            (
                (label, date_format(localtime(when), "SHORT_DATETIME_FORMAT"))
                for label, when in lines
                if when
            ),
        )

    @admin.display(description="spend this month")
    def spend_this_month(self, obj: ApiKey):
        return key_spend_used(obj) if obj.pk else "-"

    @admin.display(description="spend this month")
    def spend_used(self, obj: ApiKey):
        return key_spend_used(obj, compact=True)

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return (*self.readonly_fields, "monthly_spend_budget", "spend_this_month")

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["tenant", "name", "scopes", "expires_at", "monthly_spend_budget"]
        return [*self.readonly_fields, "monthly_spend_budget", "spend_this_month"]

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = ApiKeyCreateForm
        form = super().get_form(request, obj, change=change, **kwargs)
        if "monthly_spend_budget" in form.base_fields:
            form.base_fields["monthly_spend_budget"].help_text = (
                "This key's own spend per calendar month (UTC), inside its tenant's budget; "
                "empty: none. " + _SPEND_HELP.split(". ", 1)[1]
            )
        return form

    def has_change_permission(self, request, obj=None) -> bool:
        # A key's page is for reading (no Save button); revoking has its own page.
        return False if obj is not None else super().has_change_permission(request)

    def get_urls(self):
        revoke = self.admin_site.admin_view(self.revoke_view)
        return [
            path("<int:key_id>/revoke/", revoke, name="tenants_apikey_revoke"),
            *super().get_urls(),
        ]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        key = self.get_object(request, object_id)
        can_revoke = key is not None and key.revoked_at is None and self._may_revoke(request)
        extra = {**(extra_context or {}), "can_revoke": can_revoke}
        return super().change_view(request, object_id, form_url, extra)

    def save_model(self, request, obj, form, change):
        if change:
            return  # keys are immutable; revoke and create a new one instead
        data = form.cleaned_data
        created = api_key_create(
            tenant=data["tenant"],
            name=data["name"],
            scopes=data.get("scopes") or [],
            expires_at=data.get("expires_at"),
            actor=request.user,
        )
        key = created.key
        if data.get("monthly_spend_budget") is not None:
            key = api_key_set_spend_budget(
                key=key, monthly_spend_budget=data["monthly_spend_budget"], actor=request.user
            )
        adopt_created_row(obj, key)
        request._created_api_key_secret = created.secret

    def response_add(self, request, obj, post_url_continue=None):
        secret = getattr(request, "_created_api_key_secret", None)
        if secret is None:
            return super().response_add(request, obj, post_url_continue)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "key": obj,
            "secret": secret,
            "scopes": scope_label(obj.scopes),
            "api_base_url": request.build_absolute_uri("/v1"),
            "title": "API key created",
        }
        response = TemplateResponse(request, "admin/tenants/apikey/created.html", context)
        response["Cache-Control"] = "no-store"  # the page holds the only copy of the secret
        return response

    def _may_revoke(self, request) -> bool:
        return super().has_change_permission(request)

    def _revoke_confirmed(self, request, keys: list[ApiKey]):
        for key in keys:
            api_key_revoke(key=key, actor=request.user)
        self.message_user(
            request,
            f"Revoked {len(keys)} key(s); API processes refuse them within seconds.",
            messages.SUCCESS,
        )

    def _revoke_confirmation(self, request, keys: list[ApiKey], *, from_list: bool):
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "keys": keys,
            "from_list": from_list,
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            "title": "Revoke API keys?" if len(keys) > 1 else "Revoke this API key?",
        }
        return TemplateResponse(request, "admin/tenants/apikey/revoke_confirmation.html", context)

    def revoke_view(self, request, key_id: int):
        """The key page's Revoke button: a confirmation page, then the revocation."""
        if not self._may_revoke(request):
            return HttpResponseRedirect(reverse("admin:tenants_apikey_change", args=[key_id]))
        key = get_object_or_404(ApiKey.objects.select_related("tenant"), pk=key_id)
        if key.revoked_at is not None:
            self.message_user(request, f"{key.prefix}… was already revoked.", messages.INFO)
        elif request.method == "POST":
            self._revoke_confirmed(request, [key])
        else:
            return self._revoke_confirmation(request, [key], from_list=False)
        return HttpResponseRedirect(reverse("admin:tenants_apikey_change", args=[key.pk]))

    @admin.action(description="Revoke selected keys…")
    def revoke(self, request, queryset):
        keys = list(queryset.select_related("tenant").filter(revoked_at__isnull=True))
        if not keys:
            self.message_user(request, "The selected keys were already revoked.", messages.INFO)
            return None
        if request.POST.get("confirm") != "yes":
            return self._revoke_confirmation(request, keys, from_list=True)
        self._revoke_confirmed(request, keys)
        return None

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # revoke instead: usage records keep pointing at the key
