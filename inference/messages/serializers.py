"""POST /v1/messages and /v1/messages/count_tokens request bodies (Anthropic's Messages API).

Every field the ``anthropic`` SDK (2.x) sends is either honoured, accepted with no effect (a
field about Anthropic's own service, listed in NO_EFFECT_FIELDS), or refused with a 400 that
says why (REFUSED_FIELDS, unknown fields, image and document blocks, server tools).
Content blocks are checked in blocks.py; conversion.py turns the body into a chat body.
"""

from __future__ import annotations

from rest_framework import serializers

from inference.messages.blocks import BLOCKS_OF_ROLE, ContentBlocksField, SystemField
from inference.schemas.chat import MAX_MESSAGES
from inference.schemas.fields import (
    MAX_NAME_LENGTH,
    StopField,
    StrictBooleanField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
)
from inference.schemas.sampling import SamplingFields
from inference.schemas.structured import NAME_ERROR, NAME_PATTERN, JsonSchemaField
from inference.schemas.tools import MAX_TOOLS
from inference.schemas.validation import missing_field_errors

# Fields about Anthropic's own service (billing, placement, its prompt cache's breakpoints,
# diagnostics of its cache): accepted so that clients written for Anthropic work unchanged,
# and without effect here (this server caches every prefix on its own, see docs/api.md).
NO_EFFECT_FIELDS = (
    "cache_control",
    "service_tier",
    "inference_geo",
    "speed",
    "diagnostics",
    "user_profile_id",
    "workspace_id",
    "context_management",
)
# Fields asking for something this server does not have: refused, with why.
REFUSED_FIELDS = {
    "container": "code execution containers are not supported by this server.",
    "mcp_servers": "MCP servers are not supported by this server; call tools from the client.",
}
EFFORTS = ("low", "medium", "high", "xhigh", "max")
# Anthropic's minimum thinking budget.
MIN_THINKING_BUDGET = 1024


class MessageParamSerializer(serializers.Serializer):
    role = serializers.ChoiceField(
        choices=list(BLOCKS_OF_ROLE),
        error_messages={
            "invalid_choice": "must be 'user' or 'assistant' (use `system` for a system prompt)."
        },
    )
    content = ContentBlocksField()

    def validate(self, attrs):
        allowed = BLOCKS_OF_ROLE[attrs["role"]]
        for index, block in enumerate(attrs["content"]):
            if block["type"] not in allowed:
                raise serializers.ValidationError(
                    {
                        "content": {
                            index: f"{attrs['role']} messages cannot hold {block['type']} blocks."
                        }
                    }
                )
        return attrs


class MessagesToolSerializer(serializers.Serializer):
    """A client tool. Anthropic's server tools (``type`` "web_search_20250305", "bash_...")
    run on Anthropic's side and are refused."""

    type = StrictCharField(required=False, allow_null=True)
    name = StrictCharField(max_length=64)
    description = StrictCharField(required=False, allow_blank=True)
    input_schema = JsonSchemaField()
    # Accepted: prompt-cache breakpoints, and options of Anthropic's tool runner.
    cache_control = serializers.DictField(required=False, allow_null=True)
    strict = StrictBooleanField(required=False)

    def to_internal_value(self, data):
        if isinstance(data, dict) and data.get("type") not in (None, "custom"):
            raise serializers.ValidationError(
                f"server tools ({data['type']!r}) are not supported: give client tools "
                "(name, description, input_schema) and run them yourself."
            )
        return super().to_internal_value(data)

    def validate_name(self, value):
        if not NAME_PATTERN.match(value):
            raise serializers.ValidationError(NAME_ERROR)
        return value


class MessagesToolChoiceSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["auto", "any", "tool", "none"])
    name = StrictCharField(required=False, max_length=64)
    disable_parallel_tool_use = StrictBooleanField(required=False)

    def validate(self, attrs):
        if attrs["type"] == "tool" and not attrs.get("name"):
            raise serializers.ValidationError({"name": "is required when type is 'tool'."})
        return attrs


class ThinkingConfigSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["enabled", "disabled", "adaptive", "between_tools"])
    budget_tokens = StrictIntegerField(required=False, min_value=MIN_THINKING_BUDGET)
    display = serializers.ChoiceField(
        choices=["summarized", "omitted"], required=False, allow_null=True
    )

    def validate(self, attrs):
        if attrs["type"] == "enabled" and "budget_tokens" not in attrs:
            raise serializers.ValidationError(
                {"budget_tokens": "is required when type is 'enabled'."}
            )
        return attrs


class MessagesOutputFormatSerializer(serializers.Serializer):
    type = serializers.ChoiceField(choices=["json_schema"])
    schema = JsonSchemaField()


class OutputConfigSerializer(serializers.Serializer):
    effort = serializers.ChoiceField(choices=list(EFFORTS), required=False, allow_null=True)
    format = MessagesOutputFormatSerializer(required=False, allow_null=True)


class MessagesMetadataSerializer(serializers.Serializer):
    user_id = StrictCharField(
        required=False, allow_null=True, allow_blank=True, max_length=MAX_NAME_LENGTH
    )


class CountTokensRequestSerializer(serializers.Serializer):
    """What makes a prompt: the fields /v1/messages/count_tokens takes."""

    model = StrictCharField(
        max_length=MAX_NAME_LENGTH,
        error_messages=missing_field_errors("`model` is required: a model id from /v1/models."),
    )
    messages = MessageParamSerializer(many=True, allow_empty=False, max_length=MAX_MESSAGES)
    system = SystemField(required=False)
    tools = MessagesToolSerializer(many=True, required=False, max_length=MAX_TOOLS)
    tool_choice = MessagesToolChoiceSerializer(required=False)
    thinking = ThinkingConfigSerializer(required=False)
    output_config = OutputConfigSerializer(required=False)
    # The fields that ask for what this server has not (NO_EFFECT_FIELDS are let through).
    container = serializers.JSONField(required=False)
    mcp_servers = serializers.JSONField(required=False)

    def known_fields(self) -> set[str]:
        return set(self.fields) | set(NO_EFFECT_FIELDS)

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - self.known_fields())
            if unknown:
                raise serializers.ValidationError(
                    {unknown[0]: "is not a field of this request (extra inputs are not permitted)."}
                )
            for field, why in REFUSED_FIELDS.items():
                if data.get(field) is not None:
                    raise serializers.ValidationError({field: why})
        return super().to_internal_value(data)

    def validate(self, attrs):
        tools, choice = attrs.get("tools") or [], attrs.get("tool_choice")
        names = [tool["name"] for tool in tools]
        if len(set(names)) != len(names):
            raise serializers.ValidationError({"tools": "tool names must be unique."})
        if choice and choice["type"] in ("any", "tool") and not tools:
            raise serializers.ValidationError(
                {"tool_choice": f"tool_choice {choice['type']!r} needs tools."}
            )
        if choice and choice["type"] == "tool" and choice["name"] not in names:
            raise serializers.ValidationError(
                {"tool_choice": f"no tool named {choice['name']!r} in tools."}
            )
        if attrs["messages"][-1]["role"] != "user":
            raise serializers.ValidationError(
                {
                    "messages": "the last message must be a user turn: continuing an "
                    "assistant turn (prefill) is not supported by this server."
                }
            )
        return attrs


class MessagesRequestSerializer(CountTokensRequestSerializer):
    """POST /v1/messages. ``temperature``, ``top_p`` and ``top_k`` are Anthropic's fields
    (the current SDK sends them through ``extra_body``); ``max_tokens`` is required, as
    Anthropic requires it."""

    max_tokens = StrictIntegerField(
        min_value=1,
        error_messages={
            **missing_field_errors("`max_tokens` is required (the most tokens to generate)."),
            "min_value": "must be at least 1.",
        },
    )
    stop_sequences = StopField(required=False)
    temperature = StrictFloatField(required=False, allow_null=True, min_value=0.0, max_value=1.0)
    top_p = StrictFloatField(required=False, allow_null=True, min_value=0.0, max_value=1.0)
    top_k = StrictIntegerField(required=False, allow_null=True, min_value=0)
    stream = StrictBooleanField(required=False, default=False)
    metadata = MessagesMetadataSerializer(required=False)

    def validate_top_p(self, value):
        return SamplingFields.validate_top_p(self, value)

    def validate(self, attrs):
        attrs = super().validate(attrs)
        thinking = attrs.get("thinking") or {}
        if thinking.get("type") == "enabled" and thinking["budget_tokens"] >= attrs["max_tokens"]:
            raise serializers.ValidationError(
                {"thinking": "thinking.budget_tokens must be less than max_tokens."}
            )
        return attrs
