"""POST /v1/chat/completions request body."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inference.schemas.fields import StrictBooleanField, StrictCharField, StrictIntegerField
from inference.schemas.sampling import MAX_TOP_LOGPROBS, SamplingRequestSerializer

ROLES = ["system", "developer", "user", "assistant", "tool"]


_TEXT_PART = {
    "type": "object",
    "properties": {"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}},
    "required": ["type", "text"],
}


@extend_schema_field({"oneOf": [{"type": "string"}, {"type": "array", "items": _TEXT_PART}]})
class MessageContentField(serializers.Field):
    """A message's content: a string, or a list of ``{"type": "text", "text": ...}`` parts."""

    default_error_messages = {
        "invalid": "must be a string or a list of text content parts.",
        "part": "only text content parts are supported (type 'text').",
    }

    def to_internal_value(self, data):
        if isinstance(data, str):
            return data
        if not isinstance(data, list):
            self.fail("invalid")
        texts = []
        for part in data:
            if not isinstance(part, dict) or part.get("type") != "text":
                self.fail("part")
            if not isinstance(part.get("text"), str):
                self.fail("invalid")
            texts.append(part["text"])
        return "".join(texts)

    def to_representation(self, value):
        return value


class ChatMessageSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=ROLES)
    content = MessageContentField(required=False, allow_null=True)
    name = StrictCharField(required=False)

    def validate(self, attrs):
        if attrs.get("content") is None:
            attrs["content"] = ""
        return attrs


class ChatCompletionRequestSerializer(SamplingRequestSerializer):
    messages = ChatMessageSerializer(many=True, allow_empty=False)
    max_completion_tokens = StrictIntegerField(required=False, allow_null=True, min_value=1)
    logprobs = StrictBooleanField(required=False, default=False)
    top_logprobs = StrictIntegerField(
        required=False, allow_null=True, min_value=0, max_value=MAX_TOP_LOGPROBS
    )
    tools = serializers.ListField(required=False, allow_null=True)
    add_generation_prompt = StrictBooleanField(required=False, default=True)
    chat_template_kwargs = serializers.DictField(required=False, allow_null=True)

    def validate_tools(self, value):
        if value:
            raise serializers.ValidationError("tool calling is not supported by this server.")
        return value

    def validate(self, attrs):
        attrs = super().validate(attrs)
        if attrs.get("top_logprobs") and not attrs.get("logprobs"):
            raise serializers.ValidationError(
                {"top_logprobs": "top_logprobs requires logprobs to be true."}
            )
        return attrs
