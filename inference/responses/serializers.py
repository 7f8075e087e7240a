"""POST /v1/responses request body: OpenAI's fields, and vLLM's sampling extras."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inference.reasoning.template import EFFORTS
from inference.responses import items
from inference.schemas.fields import (
    MAX_NAME_LENGTH,
    MetadataField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
)
from inference.schemas.sampling import MAX_TOP_LOGPROBS, SamplingFields
from inference.schemas.structured import StructuredOutputsSerializer

MAX_TOOLS = 128
_TEXT_PART = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": list(items.TEXT_PARTS)},
        "text": {"type": "string"},
    },
    "required": ["type", "text"],
}
_INPUT_ITEM = {
    "oneOf": [
        {
            "type": "object",
            "description": "A message (type 'message' may be left out).",
            "properties": {
                "type": {"type": "string", "enum": ["message"]},
                "role": {"type": "string", "enum": list(items.ROLES)},
                "content": {"oneOf": [{"type": "string"}, {"type": "array", "items": _TEXT_PART}]},
            },
            "required": ["role", "content"],
        },
        {
            "type": "object",
            "description": "A function call the model made (from a previous output).",
            "properties": {
                "type": {"type": "string", "enum": ["function_call"]},
                "call_id": {"type": "string"},
                "name": {"type": "string"},
                "arguments": {"type": "string"},
            },
            "required": ["type", "call_id", "name", "arguments"],
        },
        {
            "type": "object",
            "description": "The result of a function call, fed back to the model.",
            "properties": {
                "type": {"type": "string", "enum": ["function_call_output"]},
                "call_id": {"type": "string"},
                "output": {"type": "string"},
            },
            "required": ["type", "call_id", "output"],
        },
        {
            "type": "object",
            "description": "The model's thinking (from a previous output), given back to "
            "templates that render it.",
            "properties": {
                "type": {"type": "string", "enum": ["reasoning"]},
                "content": {"type": "array", "items": {"type": "object"}},
                "summary": {"type": "array", "items": {"type": "object"}},
            },
            "required": ["type"],
        },
    ]
}


@extend_schema_field({"oneOf": [{"type": "string"}, {"type": "array", "items": _INPUT_ITEM}]})
class ResponseInputField(serializers.Field):
    """``input``: a string (one user message) or a list of input items, given ids."""

    def to_internal_value(self, data):
        return items.input_items(data)

    def to_representation(self, value):
        return value


class FunctionToolSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["function"])
    name = StrictCharField(max_length=64)
    description = StrictCharField(required=False, allow_null=True, allow_blank=True)
    parameters = serializers.DictField(required=False, allow_null=True)
    strict = StrictBooleanField(required=False, allow_null=True)


class NamedToolChoiceSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["function"])
    name = StrictCharField(max_length=64)


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "enum": ["none", "auto", "required"]},
            {
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": ["function"]},
                    "name": {"type": "string"},
                },
                "required": ["type", "name"],
            },
        ]
    }
)
class ToolChoiceField(serializers.Field):
    default_error_messages = {
        # Braces doubled: DRF formats these messages with str.format.
        "invalid": "must be 'none', 'auto', 'required' or {{\"type\": \"function\", \"name\": ...}}."
    }

    def to_internal_value(self, data):
        if data in ("none", "auto", "required"):
            return data
        if not isinstance(data, dict):
            self.fail("invalid")
        named = NamedToolChoiceSerializer(data=data)
        named.is_valid(raise_exception=True)
        return dict(named.validated_data)

    def to_representation(self, value):
        return value


class TextFormatSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["text", "json_object", "json_schema"])
    name = StrictCharField(required=False, max_length=64)
    schema = serializers.DictField(required=False)
    description = StrictCharField(required=False, allow_blank=True)
    strict = StrictBooleanField(required=False, allow_null=True)

    def validate(self, attrs):
        if attrs["type"] == "json_schema" and ("schema" not in attrs or "name" not in attrs):
            raise serializers.ValidationError("json_schema formats need a name and a schema.")
        return attrs


class TextConfigSerializer(serializers.Serializer):
    format = TextFormatSerializer(required=False)


class ReasoningConfigSerializer(serializers.Serializer):
    effort = serializers.ChoiceField(choices=list(EFFORTS), required=False, allow_null=True)
    # Accepted; no summary is made: the reasoning item carries the whole thinking instead.
    summary = serializers.ChoiceField(
        choices=["auto", "concise", "detailed"], required=False, allow_null=True
    )
    generate_summary = serializers.ChoiceField(
        choices=["auto", "concise", "detailed"], required=False, allow_null=True
    )


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string"},
            {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
        ],
        "nullable": True,
    }
)
class ConversationRefField(serializers.Field):
    """``conversation``: a conversation's id, or ``{"id": ...}``; the id either way."""

    default_error_messages = {"invalid": "must be a conversation id or an object with its id."}

    def to_internal_value(self, data):
        if isinstance(data, dict):
            data = data.get("id")
        if not isinstance(data, str) or not data or len(data) > 64:
            self.fail("invalid")
        return data

    def to_representation(self, value):
        return value


class ResponsesRequestSerializer(SamplingFields):
    """OpenAI's Responses fields; the sampling fields (vLLM's extras too) are chat's."""

    model = StrictCharField(help_text="A model id from GET /v1/models.", max_length=MAX_NAME_LENGTH)
    input = ResponseInputField(help_text="A string (one user message) or a list of input items.")
    instructions = StrictCharField(
        required=False, allow_null=True, allow_blank=True, help_text="The system message."
    )
    previous_response_id = StrictCharField(
        required=False, allow_null=True, max_length=64, help_text="A stored response to continue."
    )
    conversation = ConversationRefField(
        required=False,
        allow_null=True,
        help_text="A conversation (POST /v1/conversations) to continue: its items come before "
        "input, and this response's input and output are added to it.",
    )
    store = StrictBooleanField(required=False, default=True)
    stream = StrictBooleanField(required=False, default=False)
    background = StrictBooleanField(
        required=False,
        allow_null=True,
        default=False,
        help_text="Run on after the answer: poll GET /v1/responses/{id}; with stream, its "
        "events can be streamed again from any point (GET ...?stream=true&starting_after=N).",
    )
    max_output_tokens = StrictIntegerField(required=False, allow_null=True, min_value=1)
    tools = FunctionToolSerializer(many=True, required=False, max_length=MAX_TOOLS)
    tool_choice = ToolChoiceField(required=False, allow_null=True)
    parallel_tool_calls = StrictBooleanField(required=False, allow_null=True)
    text = TextConfigSerializer(required=False, allow_null=True)
    metadata = MetadataField()
    # vLLM's extra: a regex, grammar, choice or JSON constraint on the output (text.format
    # covers JSON only), passed to the chat generation as chat's field of that name.
    structured_outputs = StructuredOutputsSerializer(required=False, allow_null=True)
    reasoning = ReasoningConfigSerializer(
        required=False,
        allow_null=True,
        help_text="effort goes to the chat template as chat's reasoning_effort does.",
    )
    truncation = serializers.ChoiceField(
        choices=["disabled", "auto"], required=False, allow_null=True
    )
    # "message.output_text.logprobs" gives the answer's token logprobs (top_logprobs
    # alternatives each); other values name what this server does not make, and are ignored.
    include = serializers.ListField(
        child=StrictCharField(max_length=128), required=False, allow_null=True, max_length=16
    )
    top_logprobs = StrictIntegerField(
        required=False, allow_null=True, min_value=0, max_value=MAX_TOP_LOGPROBS
    )

    def validate(self, attrs):
        choice = attrs.get("tool_choice")
        names = {tool["name"] for tool in attrs.get("tools") or []}
        if isinstance(choice, dict) and choice["name"] not in names:
            raise serializers.ValidationError(
                {"tool_choice": f"names the function {choice['name']!r}, which tools do not list."}
            )
        if choice == "required" and not names:
            raise serializers.ValidationError({"tool_choice": "'required' needs tools."})
        if attrs.get("background") and not attrs.get("store", True):
            raise serializers.ValidationError(
                {"background": "a background response is read back when done: it needs store."}
            )
        if attrs.get("conversation") and attrs.get("previous_response_id"):
            raise serializers.ValidationError(
                {"conversation": "give either conversation or previous_response_id, not both."}
            )
        return attrs
