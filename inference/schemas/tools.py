"""Tool fields of /v1/chat/completions: ``tools``, ``tool_choice``, ``parallel_tool_calls``,
and the tool calls of earlier assistant turns."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inference.schemas.fields import (
    MAX_NAME_LENGTH,
    StrictBooleanField,
    StrictCharField,
    optional_list,
)
from inference.schemas.structured import NAME_ERROR, NAME_PATTERN, JsonSchemaField

MAX_TOOLS = 128  # OpenAI's limit
MAX_TOOL_CALLS = 128  # per assistant message


def _check_name(value: str) -> str:
    if not NAME_PATTERN.match(value):
        raise serializers.ValidationError(NAME_ERROR)
    return value


class FunctionSerializer(serializers.Serializer):
    name = StrictCharField(max_length=64, validators=[_check_name])
    description = StrictCharField(required=False, allow_null=True, allow_blank=True)
    parameters = JsonSchemaField(required=False, allow_null=True)
    strict = StrictBooleanField(required=False, allow_null=True)


class ToolSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["function"])
    function = FunctionSerializer()


class NamedFunctionSerializer(serializers.Serializer):
    name = StrictCharField(max_length=64)


class NamedToolChoiceSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["function"])
    function = NamedFunctionSerializer()


TOOL_CHOICE_MODES = ("none", "auto", "required")


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "enum": list(TOOL_CHOICE_MODES)},
            {
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": ["function"]},
                    "function": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}},
                        "required": ["name"],
                    },
                },
                "required": ["type", "function"],
            },
        ]
    }
)
class ToolChoiceField(serializers.Field):
    """ "none", "auto", "required", or ``{"type": "function", "function": {"name": ...}}``."""

    default_error_messages = {
        # Braces doubled: DRF formats error messages.
        "invalid": "must be 'none', 'auto', 'required' or "
        '{{"type": "function", "function": {{"name": ...}}}}.'
    }

    def to_internal_value(self, data):
        if isinstance(data, str):
            if data not in TOOL_CHOICE_MODES:
                self.fail("invalid")
            return data
        if not isinstance(data, dict):
            self.fail("invalid")
        named = NamedToolChoiceSerializer(data=data)
        if not named.is_valid():
            self.fail("invalid")
        return named.validated_data

    def to_representation(self, value):
        return value


class CalledFunctionSerializer(serializers.Serializer):
    name = StrictCharField(max_length=64)
    arguments = StrictCharField(allow_blank=True)


class ToolCallSerializer(serializers.Serializer):
    """A call in an earlier assistant message, as the API returned it."""

    id = StrictCharField(max_length=MAX_NAME_LENGTH)
    type = serializers.ChoiceField(choices=["function"], required=False, default="function")
    function = CalledFunctionSerializer()


def tool_calls_field() -> serializers.ListSerializer:
    return optional_list(ToolCallSerializer(), max_length=MAX_TOOL_CALLS)


class ToolRequestFields(serializers.Serializer):
    tools = optional_list(ToolSerializer(), max_length=MAX_TOOLS)
    tool_choice = ToolChoiceField(required=False, allow_null=True)
    parallel_tool_calls = StrictBooleanField(required=False, allow_null=True)

    def validate_tool_fields(self, attrs) -> None:
        tools, choice = attrs.get("tools") or [], attrs.get("tool_choice")
        names = [tool["function"]["name"] for tool in tools]
        if len(set(names)) != len(names):
            raise serializers.ValidationError({"tools": "function names must be unique."})
        if choice not in (None, "none") and not tools:
            raise serializers.ValidationError(
                {"tool_choice": "tool_choice is only allowed when tools are specified."}
            )
        if isinstance(choice, dict) and choice["function"]["name"] not in names:
            raise serializers.ValidationError(
                {"tool_choice": f"no function named {choice['function']['name']!r} in tools."}
            )
