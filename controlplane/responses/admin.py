"""Stored responses and conversations in the admin: read-only (clients make and delete them)."""

import json

from django.contrib import admin
from django.utils.html import format_html

from controlplane.common.read_only_admin import ReadOnlyModelAdmin
from controlplane.responses.models import Conversation, StoredResponse


@admin.register(StoredResponse)
class StoredResponseAdmin(ReadOnlyModelAdmin):
    list_display = ("id", "tenant", "model", "status", "created_at")
    list_filter = ("status", "tenant")
    search_fields = ("id", "previous_response_id", "key_prefix")
    date_hierarchy = "created_at"
    readonly_fields = [field.name for field in StoredResponse._meta.fields]


@admin.register(Conversation)
class ConversationAdmin(ReadOnlyModelAdmin):
    list_display = ("id", "tenant", "created_at")
    list_filter = ("tenant",)
    search_fields = ("id", "key_prefix")
    date_hierarchy = "created_at"
    readonly_fields = [field.name for field in Conversation._meta.fields] + ["items_in_order"]

    @admin.display(description="items")
    def items_in_order(self, conversation: Conversation):
        items = conversation.items.order_by("position").values_list("item", flat=True)
        return format_html("<pre>{}</pre>", json.dumps(list(items), indent=2))
