"""POST /tokenize and /detokenize request bodies (vLLM's shape)."""

from __future__ import annotations

from rest_framework import serializers

from inference.schemas.chat import ChatTemplateKwargsField, chat_messages_field
from inference.schemas.fields import (
    MAX_NAME_LENGTH,
    StrictBooleanField,
    StrictCharField,
    TokenIdListField,
)


class TokenizeRequestSerializer(serializers.Serializer):
    model = StrictCharField(max_length=MAX_NAME_LENGTH)
    prompt = StrictCharField(required=False, allow_blank=True)
    messages = chat_messages_field(required=False)
    add_special_tokens = StrictBooleanField(required=False, default=True)
    add_generation_prompt = StrictBooleanField(required=False, default=True)
    chat_template_kwargs = ChatTemplateKwargsField(required=False, allow_null=True)

    def validate(self, attrs):
        if ("prompt" in attrs) == ("messages" in attrs):
            raise serializers.ValidationError(
                {"prompt": "give exactly one of 'prompt' or 'messages'."}
            )
        return attrs


class DetokenizeRequestSerializer(serializers.Serializer):
    model = StrictCharField(max_length=MAX_NAME_LENGTH)
    tokens = TokenIdListField()
