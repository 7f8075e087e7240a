"""An admin for records nobody edits by hand (usage, alerts, the audit log, stored responses):
shown and filtered, never added, changed or deleted (so no delete action either)."""

from django.contrib import admin


class ReadOnlyModelAdmin(admin.ModelAdmin):
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
