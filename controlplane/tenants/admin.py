"""Tenants and API keys in the Django admin. Every write goes through the services, so the
admin, the commands and the API share one set of rules, one audit log and one cache epoch."""

from __future__ import annotations

from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.utils.html import format_html

from controlplane.common.admin_rows import adopt_created_row
from controlplane.tenants.forms import ApiKeyCreateForm
from controlplane.tenants.models import ApiKey, Tenant
from controlplane.tenants.selectors import tenant_get_by_pk
from controlplane.tenants.services import (
    api_key_create,
    api_key_revoke,
    tenant_create,
    tenant_rotate_cache_salt,
    tenant_set_allowed_models,
    tenant_update,
)

_LIMITS = (
    "requests_per_minute",
    "tokens_per_minute",
    "max_concurrent_requests",
    "monthly_token_budget",
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
    list_display = ("name", "slug", "is_active", *_LIMITS, "num_keys")
    list_filter = ("is_active",)
    search_fields = ("name", "slug")
    readonly_fields = ("slug", "cache_salt_rotated_at", "created_at")
    filter_horizontal = ("allowed_models",)
    fieldsets = (
        (None, {"fields": ("name", "slug", "is_active", "created_at")}),
        ("Limits (empty: unlimited)", {"fields": _LIMITS}),
        (
            "Grants",
            {
                "fields": ("allowed_models",),
                "description": "No model selected: the tenant may use every served model.",
            },
        ),
        ("Prefix-cache isolation", {"fields": ("cache_salt_rotated_at",)}),
    )
    inlines = [ApiKeyInline]
    actions = ["rotate_cache_salt", "deactivate"]

    @admin.display(description="keys")
    def num_keys(self, obj: Tenant) -> int:
        return obj.api_keys.filter(revoked_at__isnull=True).count()

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        if not change:
            created = tenant_create(
                name=data["name"], actor=request.user, **{k: data.get(k) for k in _LIMITS}
            )
            if not data.get("is_active", True):
                tenant_update(tenant=created, is_active=False, actor=request.user)
            adopt_created_row(obj, created)
            return
        fields = [f for f in form.changed_data if f in {"name", "is_active", *_LIMITS}]
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


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = (
        "prefix",
        "name",
        "tenant",
        "scope_list",
        "created_at",
        "expires_at",
        "revoked_at",
        "last_used_at",
    )
    list_filter = ("tenant", ("revoked_at", admin.EmptyFieldListFilter))
    search_fields = ("prefix", "name", "tenant__name")
    list_select_related = ("tenant",)
    actions = ["revoke"]
    readonly_fields = (
        "prefix",
        "tenant",
        "name",
        "scopes",
        "expires_at",
        "created_at",
        "revoked_at",
        "last_used_at",
    )

    @admin.display(description="scopes")
    def scope_list(self, obj: ApiKey) -> str:
        return ", ".join(obj.scopes) or "all"

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = ApiKeyCreateForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj is not None else ()

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["tenant", "name", "scopes", "expires_at"]
        return list(self.readonly_fields)

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
        adopt_created_row(obj, created.key)
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
            "title": "API key created",
        }
        response = TemplateResponse(request, "admin/tenants/apikey/created.html", context)
        response["Cache-Control"] = "no-store"  # the page holds the only copy of the secret
        return response

    @admin.action(description="Revoke selected keys")
    def revoke(self, request, queryset):
        keys = list(queryset.filter(revoked_at__isnull=True))
        for key in keys:
            api_key_revoke(key=key, actor=request.user)
        self.message_user(
            request,
            f"Revoked {len(keys)} key(s); API processes refuse them within seconds.",
            messages.SUCCESS,
        )

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # revoke instead: usage records keep pointing at the key
