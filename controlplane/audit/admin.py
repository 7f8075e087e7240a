"""The audit log in the admin: read-only, filterable."""

from django.contrib import admin

from controlplane.audit.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ("created_at", "actor_label", "action", "target_type", "target_repr")
    list_filter = ("action", "target_type")
    search_fields = ("actor_label", "target_repr", "action")
    date_hierarchy = "created_at"

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
