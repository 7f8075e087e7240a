"""Request bodies of the Conversations API."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inference.responses import items
from inference.schemas.fields import MetadataField

MAX_ITEMS_AT_ONCE = 20  # OpenAI's limit per create or add


@extend_schema_field({"type": "array", "items": {"type": "object"}})
class ConversationItemsField(serializers.Field):
    """A list of input items (as the Responses API's ``input`` holds), given ids."""

    def to_internal_value(self, data):
        if not isinstance(data, list):
            raise serializers.ValidationError("must be a list of items.")
        if len(data) > MAX_ITEMS_AT_ONCE:
            raise serializers.ValidationError(f"may add at most {MAX_ITEMS_AT_ONCE} items at once.")
        return items.input_items(data) if data else []

    def to_representation(self, value):
        return value


class ConversationCreateSerializer(serializers.Serializer):
    items = ConversationItemsField(required=False, allow_null=True)
    metadata = MetadataField()


class ConversationUpdateSerializer(serializers.Serializer):
    metadata = MetadataField(required=True)


class ItemsAddSerializer(serializers.Serializer):
    items = ConversationItemsField()
