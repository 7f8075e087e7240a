"""POST /v1/chat/completions request body."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from engine.text.tokenizer import TEMPLATE_RESERVED_NAMES
from inference.reasoning.template import EFFORTS
from inference.schemas.fields import (
    INVALID_TEXT,
    MAX_NAME_LENGTH,
    MetadataField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    is_valid_text,
)
from inference.schemas.legacy_functions import LegacyFunctionFields
from inference.schemas.sampling import MAX_TOP_LOGPROBS, SamplingRequestSerializer
from inference.schemas.tools import CalledFunctionSerializer, ToolRequestFields, tool_calls_field

# "function": a result in the deprecated function-calling shape (schemas/legacy_functions.py).
ROLES = ["system", "developer", "user", "assistant", "tool", "function"]
# OpenAI's limit; validating a message costs the event loop about 12 microseconds.
MAX_MESSAGES = 2048


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
        "text": INVALID_TEXT,
    }

    def to_internal_value(self, data):
        if isinstance(data, list):
            texts = []
            for part in data:
                if not isinstance(part, dict) or part.get("type") != "text":
                    self.fail("part")
                if not isinstance(part.get("text"), str):
                    self.fail("invalid")
                texts.append(part["text"])
            data = "".join(texts)
        if not isinstance(data, str):
            self.fail("invalid")
        if not is_valid_text(data):
            self.fail("text")
        return data

    def to_representation(self, value):
        return value


class ChatMessageSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=ROLES)
    content = MessageContentField(required=False, allow_null=True)
    name = StrictCharField(required=False, max_length=MAX_NAME_LENGTH)
    # An assistant turn's calls, and the call a ``tool`` message answers.
    tool_calls = tool_calls_field()
    tool_call_id = StrictCharField(required=False, max_length=MAX_NAME_LENGTH)
    # An assistant turn's call in the deprecated shape (read as a one-entry ``tool_calls``).
    function_call = CalledFunctionSerializer(required=False, allow_null=True)
    # An assistant turn's thinking, sent back in tool loops, under either name it is returned
    # by; kept as ``reasoning_content`` and rendered as the template expects (or dropped).
    reasoning_content = MessageContentField(required=False, allow_null=True)
    reasoning = MessageContentField(required=False, allow_null=True)

    def validate(self, attrs):
        if attrs.get("content") is None:
            attrs["content"] = ""
        thinking = attrs.pop("reasoning_content", None) or attrs.pop("reasoning", None)
        attrs.pop("reasoning", None)
        if thinking:
            if attrs["role"] != "assistant":
                raise serializers.ValidationError(
                    {"reasoning_content": "only assistant messages carry reasoning."}
                )
            attrs["reasoning_content"] = thinking
        for calls in ("tool_calls", "function_call"):
            if attrs.get(calls) and attrs["role"] != "assistant":
                raise serializers.ValidationError({calls: f"only assistant messages have {calls}."})
        if attrs.get("function_call") is None:
            attrs.pop("function_call", None)
        elif attrs.get("tool_calls"):
            raise serializers.ValidationError(
                {"function_call": "an assistant message has tool_calls or function_call, not both."}
            )
        if attrs["role"] == "function" and not attrs.get("name"):
            raise serializers.ValidationError(
                {"name": "a function message must name the function it answers (name)."}
            )
        if attrs["role"] == "tool" and not attrs.get("tool_call_id"):
            raise serializers.ValidationError(
                {"tool_call_id": "a tool message must name the call it answers (tool_call_id)."}
            )
        return attrs


class ChatTemplateKwargsField(serializers.DictField):
    """Extra arguments of the chat template, which may not replace the ones it is given."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        reserved = TEMPLATE_RESERVED_NAMES.intersection(value)
        if reserved:
            raise serializers.ValidationError(
                f"may not set {', '.join(sorted(reserved))}: the server sets those "
                "(add_generation_prompt is a request field of its own)."
            )
        return value


def chat_messages_field(**kwargs) -> ChatMessageSerializer:
    return ChatMessageSerializer(many=True, allow_empty=False, max_length=MAX_MESSAGES, **kwargs)


class ChatCompletionRequestSerializer(
    LegacyFunctionFields, ToolRequestFields, SamplingRequestSerializer
):
    messages = chat_messages_field()
    max_completion_tokens = StrictIntegerField(required=False, allow_null=True, min_value=1)
    logprobs = StrictBooleanField(required=False, default=False)
    top_logprobs = StrictIntegerField(
        required=False, allow_null=True, min_value=0, max_value=MAX_TOP_LOGPROBS
    )
    add_generation_prompt = StrictBooleanField(required=False, default=True)
    chat_template_kwargs = ChatTemplateKwargsField(required=False, allow_null=True)
    reasoning_effort = serializers.ChoiceField(
        choices=list(EFFORTS),
        required=False,
        allow_null=True,
        help_text="Passed to chat templates that take it (gpt-oss: reasoning_effort; Qwen3: "
        "'none' turns enable_thinking off); ignored by templates that take neither.",
    )
    # Asks for output the served models cannot make: refused rather than ignored, since a
    # client asking for audio or web search would take a plain answer for that.
    modalities = serializers.ListField(
        child=serializers.ChoiceField(choices=["text", "audio"]),
        required=False,
        allow_null=True,
        max_length=2,
    )
    audio = serializers.JSONField(required=False, allow_null=True)
    web_search_options = serializers.JSONField(required=False, allow_null=True)
    # Keep the finished completion for GET /v1/chat/completions[/{id}] (OpenAI's default:
    # not kept); ``metadata`` is stored with it, to filter the list by.
    store = StrictBooleanField(required=False, allow_null=True, default=False)
    # Checked as OpenAI's metadata only with store (then it is kept); otherwise ignored as
    # before, whatever it holds (clients and proxies send their own there).
    metadata = serializers.JSONField(required=False, allow_null=True)

    def validate(self, attrs):
        attrs = super().validate(attrs)
        if "audio" in (attrs.get("modalities") or ()) or attrs.get("audio") is not None:
            field = "audio" if attrs.get("audio") is not None else "modalities"
            raise serializers.ValidationError(
                {field: "this server's models answer in text only; audio output is not supported."}
            )
        if attrs.get("web_search_options") is not None:
            raise serializers.ValidationError(
                {
                    "web_search_options": "web search is not supported: the served models answer "
                    "from their prompt only."
                }
            )
        if attrs.get("store") and attrs.get("metadata") is not None:
            try:
                attrs["metadata"] = MetadataField().run_validation(attrs["metadata"])
            except serializers.ValidationError as exc:
                raise serializers.ValidationError({"metadata": exc.detail}) from None
        self.validate_legacy_functions(attrs)
        self.validate_tool_fields(attrs)
        if attrs.get("top_logprobs") and not attrs.get("logprobs"):
            raise serializers.ValidationError(
                {"top_logprobs": "top_logprobs requires logprobs to be true."}
            )
        return attrs
