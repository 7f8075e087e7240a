"""OpenAI's deprecated function calling on /v1/chat/completions, as the tools it became.

``functions`` and ``function_call`` are the request fields that ``tools`` and ``tool_choice``
replaced in 2023; older clients (LangChain's OpenAI-functions agents, early SDK code) still
send them, and silently ignoring them would answer in plain text a client that waits for a
call. A request that uses them is validated and turned into the modern fields here, so the
template, the grammar (a named ``function_call`` is enforced like a named tool) and the
parser work as for tools; the answer comes back in the old shape, one ``function_call`` per
choice with ``finish_reason`` "function_call" (inference/formatters/chat.py). Earlier turns in
the old shape (an assistant ``function_call``, a ``role: "function"`` result) are read too.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inference.schemas.fields import optional_list
from inference.schemas.tools import MAX_TOOLS, FunctionSerializer, NamedFunctionSerializer

FUNCTION_CALL_MODES = ("none", "auto")
# The ids given to calls of earlier turns in the old shape, which had none.
LEGACY_CALL_ID = "call_legacy_{}"


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "enum": list(FUNCTION_CALL_MODES)},
            {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
            },
        ]
    }
)
class FunctionCallChoiceField(serializers.Field):
    """ "none", "auto", or ``{"name": ...}`` (deprecated: ``tool_choice``)."""

    default_error_messages = {"invalid": "must be 'none', 'auto' or {{\"name\": ...}}."}

    def to_internal_value(self, data):
        if isinstance(data, str):
            if data not in FUNCTION_CALL_MODES:
                self.fail("invalid")
            return data
        named = NamedFunctionSerializer(data=data)
        if not isinstance(data, dict) or not named.is_valid():
            self.fail("invalid")
        return named.validated_data

    def to_representation(self, value):
        return value


class LegacyFunctionFields(serializers.Serializer):
    functions = optional_list(
        FunctionSerializer(),
        max_length=MAX_TOOLS,
        help_text="Deprecated: use tools. Answered with message.function_call.",
    )
    function_call = FunctionCallChoiceField(
        required=False, allow_null=True, help_text="Deprecated: use tool_choice."
    )

    def validate_legacy_functions(self, attrs) -> None:
        """``functions`` and ``function_call`` as ``tools`` and ``tool_choice`` (one call a
        turn, as the old API made), and ``legacy_functions`` set to answer in their shape."""
        functions, choice = attrs.pop("functions", None), attrs.pop("function_call", None)
        attrs["messages"] = legacy_messages(attrs["messages"])
        if not functions:
            if choice not in (None, "none"):
                raise serializers.ValidationError(
                    {"function_call": "function_call is only allowed when functions are given."}
                )
            return
        if attrs.get("tools") or attrs.get("tool_choice") is not None:
            raise serializers.ValidationError(
                {
                    "functions": "send tools and tool_choice, or the deprecated functions and "
                    "function_call, not both."
                }
            )
        attrs["tools"] = [{"type": "function", "function": f} for f in functions]
        if isinstance(choice, dict):
            attrs["tool_choice"] = {"type": "function", "function": choice}
        else:
            attrs["tool_choice"] = choice or "auto"
        attrs["parallel_tool_calls"] = False
        attrs["legacy_functions"] = True


def legacy_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Earlier turns in the old shape as tool turns: an assistant's ``function_call`` a
    ``tool_calls`` entry with an id, and a ``function`` message a ``tool`` message answering
    the latest call of that function."""
    out, calls = [], {}  # function name -> the id of its latest call
    for number, message in enumerate(messages):
        call = message.get("function_call")
        if call:
            message = {k: v for k, v in message.items() if k != "function_call"}
            calls[call["name"]] = LEGACY_CALL_ID.format(number)
            called = {"id": calls[call["name"]], "type": "function", "function": call}
            message["tool_calls"] = [called]
        elif message["role"] == "function":
            if message["name"] not in calls:
                raise serializers.ValidationError(
                    {
                        "messages": f"messages[{number}] answers a call of {message['name']!r} "
                        "that no earlier assistant message made (function_call)."
                    }
                )
            message = {**message, "role": "tool", "tool_call_id": calls[message["name"]]}
        out.append(message)
    return out
