"""Stored responses in the admin: read-only (clients create and delete them)."""

from django.contrib import admin

from controlplane.responses.models import StoredResponse


@admin.register(StoredResponse)
class StoredResponseAdmin(admin.ModelAdmin):
    list_display = ("id", "tenant", "model", "status", "created_at")
    list_filter = ("status", "tenant")
    search_fields = ("id", "previous_response_id", "key_prefix")
    date_hierarchy = "created_at"
    readonly_fields = [field.name for field in StoredResponse._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
