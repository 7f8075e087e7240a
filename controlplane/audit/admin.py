"""The audit log in the admin: read-only, filterable."""

from django.contrib import admin

from controlplane.audit.models import AuditEvent
from controlplane.common.read_only_admin import ReadOnlyModelAdmin


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyModelAdmin):
    list_display = ("created_at", "actor_label", "action", "target_type", "target_repr")
    list_filter = ("action", "target_type")
    search_fields = ("actor_label", "target_repr", "action")
    date_hierarchy = "created_at"
