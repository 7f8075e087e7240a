"""Shared prefixes in the Django admin: declare, edit, activate and deactivate, copy as a new
version. Every write goes through ``controlplane.shared_prefixes.services`` (audited, and the
API processes drop their cached prefixes within a second)."""

from __future__ import annotations

from django.contrib import admin

from controlplane.common.admin_rows import adopt_created_row
from controlplane.shared_prefixes.models import SharedPrefix
from controlplane.shared_prefixes.services import (
    shared_prefix_create,
    shared_prefix_new_version,
    shared_prefix_set_models,
    shared_prefix_update,
)

_CONTENT = ("kind", "text", "messages", "tools")


@admin.register(SharedPrefix)
class SharedPrefixAdmin(admin.ModelAdmin):
    list_display = ("name", "version", "kind", "is_active", "model_list", "size", "updated_at")
    list_filter = ("is_active", "kind", "served_models")
    search_fields = ("name", "description")
    filter_horizontal = ("served_models",)
    fieldsets = (
        (None, {"fields": ("name", "version", "description", "is_active")}),
        (
            "What requests must start with",
            {
                "fields": _CONTENT,
                "description": "Only whole KV blocks inside the prefix are shared between "
                "tenants; everything after it stays under each tenant's own cache salt. "
                "A request matches when its prompt, as tokens after the chat template, starts "
                "with this prefix's tokens: a chat prefix should be the leading messages "
                "(and the tools) exactly as clients send them.",
            },
        ),
        ("Models", {"fields": ("served_models",)}),
        ("History", {"fields": ("created_at", "updated_at")}),
    )
    readonly_fields = ("created_at", "updated_at")
    actions = ["activate", "deactivate", "new_version"]

    def get_readonly_fields(self, request, obj=None):
        # A version's identity is fixed once declared: changed content gets a new version.
        fixed = ("name", "version") if obj is not None else ()
        return (*fixed, *self.readonly_fields)

    @admin.display(description="models")
    def model_list(self, obj: SharedPrefix) -> str:
        return ", ".join(m.name for m in obj.served_models.all()) or "every model"

    @admin.display(description="characters")
    def size(self, obj: SharedPrefix) -> int:
        if obj.kind == SharedPrefix.Kind.TEXT:
            return len(obj.text)
        return sum(len(str(m.get("content", ""))) for m in obj.messages if isinstance(m, dict))

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("served_models")

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        if not change:
            created = shared_prefix_create(
                name=data["name"],
                version=data.get("version"),
                description=data.get("description", ""),
                is_active=data.get("is_active", True),
                model_names=[m.name for m in data.get("served_models", [])],
                actor=request.user,
                **{field: data.get(field) for field in _CONTENT},
            )
            adopt_created_row(obj, created)
            return
        fields = [f for f in form.changed_data if f in {"description", "is_active", *_CONTENT}]
        if fields:
            current = SharedPrefix.objects.get(pk=obj.pk)
            shared_prefix_update(prefix=current, actor=request.user, **{f: data[f] for f in fields})

    def save_related(self, request, form, formsets, change):
        if change and "served_models" in form.changed_data:
            names = [m.name for m in form.cleaned_data.get("served_models", [])]
            shared_prefix_set_models(prefix=form.instance, model_names=names, actor=request.user)

    @admin.action(description="Activate")
    def activate(self, request, queryset):
        for prefix in queryset:
            shared_prefix_update(prefix=prefix, is_active=True, actor=request.user)
        self.message_user(request, f"Activated {len(queryset)} shared prefix(es).")

    @admin.action(description="Deactivate (requests stop sharing it)")
    def deactivate(self, request, queryset):
        for prefix in queryset:
            shared_prefix_update(prefix=prefix, is_active=False, actor=request.user)
        self.message_user(request, f"Deactivated {len(queryset)} shared prefix(es).")

    @admin.action(description="Copy as a new version (inactive)")
    def new_version(self, request, queryset):
        made = [shared_prefix_new_version(prefix=p, actor=request.user) for p in queryset]
        self.message_user(request, "Created " + ", ".join(str(p) for p in made) + ".")
