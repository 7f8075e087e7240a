"""Stored chat completions in the admin: read-only (clients create, update and delete them)."""

from django.contrib import admin

from controlplane.chat_store.models import StoredChatCompletion
from controlplane.common.read_only_admin import ReadOnlyModelAdmin


@admin.register(StoredChatCompletion)
class StoredChatCompletionAdmin(ReadOnlyModelAdmin):
    list_display = ("id", "tenant", "model", "created_at")
    list_filter = ("tenant",)
    search_fields = ("id", "key_prefix", "model")
    date_hierarchy = "created_at"
    readonly_fields = [field.name for field in StoredChatCompletion._meta.fields]
