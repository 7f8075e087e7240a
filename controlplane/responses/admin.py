"""Stored responses in the admin: read-only (clients create and delete them)."""

from django.contrib import admin

from controlplane.common.read_only_admin import ReadOnlyModelAdmin
from controlplane.responses.models import StoredResponse


@admin.register(StoredResponse)
class StoredResponseAdmin(ReadOnlyModelAdmin):
    list_display = ("id", "tenant", "model", "status", "created_at")
    list_filter = ("status", "tenant")
    search_fields = ("id", "previous_response_id", "key_prefix")
    date_hierarchy = "created_at"
    readonly_fields = [field.name for field in StoredResponse._meta.fields]
