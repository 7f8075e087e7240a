"""The deprecated ``functions`` / ``function_call`` fields of /v1/chat/completions are read
as the tools they became (inference/schemas/legacy_functions.py), never silently ignored."""

from __future__ import annotations

import pytest

from inference.errors import ApiError
from inference.schemas.chat import ChatCompletionRequestSerializer
from inference.schemas.validation import validate_body

USER = [{"role": "user", "content": "Weather in Paris?"}]
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def _chat(**fields) -> dict:
    return validate_body(
        ChatCompletionRequestSerializer, {"model": "m", "messages": USER, **fields}
    )


def _refused(**fields) -> ApiError:
    with pytest.raises(ApiError) as caught:
        _chat(**fields)
    assert caught.value.status == 400
    return caught.value


@pytest.mark.parametrize(
    ("function_call", "tool_choice"),
    [
        (None, "auto"),
        ("auto", "auto"),
        ("none", "none"),
        ({"name": "get_weather"}, {"type": "function", "function": {"name": "get_weather"}}),
    ],
)
def test_functions_become_one_call_tools(function_call, tool_choice):
    fields = {"functions": [WEATHER]}
    if function_call is not None:
        fields["function_call"] = function_call
    body = _chat(**fields)
    assert body["tools"] == [{"type": "function", "function": WEATHER}]
    assert body["tool_choice"] == tool_choice
    assert body["parallel_tool_calls"] is False and body["legacy_functions"] is True
    assert "functions" not in body and "function_call" not in body


def test_a_request_without_functions_is_not_answered_in_the_old_shape():
    body = _chat(tools=[{"type": "function", "function": WEATHER}])
    assert "legacy_functions" not in body


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        (
            {"functions": [WEATHER], "tools": [{"type": "function", "function": WEATHER}]},
            "functions",
        ),
        ({"functions": [WEATHER], "tool_choice": "auto"}, "functions"),
        ({"function_call": {"name": "get_weather"}}, "function_call"),
        ({"functions": [WEATHER], "function_call": "required"}, "function_call"),
        ({"functions": [WEATHER], "function_call": {"name": "get_time"}}, "tool_choice"),
        ({"functions": [{"name": "two words"}]}, "functions[0].name"),
    ],
)
def test_what_the_old_fields_cannot_mean_is_a_400_naming_the_field(fields, param):
    assert _refused(**fields).param == param


def test_earlier_turns_in_the_old_shape_read_as_tool_turns():
    call = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    messages = [
        *USER,
        {"role": "assistant", "content": None, "function_call": call},
        {"role": "function", "name": "get_weather", "content": '{"sky": "clear"}'},
        {"role": "user", "content": "And tomorrow?"},
    ]
    body = _chat(messages=messages, functions=[WEATHER])
    assistant, result = body["messages"][1:3]
    (converted,) = assistant["tool_calls"]
    assert converted["function"] == call and "function_call" not in assistant
    assert result["role"] == "tool" and result["tool_call_id"] == converted["id"]
    assert result["content"] == '{"sky": "clear"}'


@pytest.mark.parametrize(
    ("message", "param"),
    [
        ({"role": "function", "name": "get_weather", "content": "18C"}, "messages"),
        ({"role": "function", "content": "18C"}, "messages[1].name"),
        (
            {"role": "user", "content": "x", "function_call": {"name": "f", "arguments": "{}"}},
            "messages[1].function_call",
        ),
    ],
)
def test_an_old_shape_turn_that_cannot_stand_is_a_400(message, param):
    assert _refused(messages=[*USER, message]).param == param
