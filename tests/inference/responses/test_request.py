"""A Responses body validated, and the chat body it amounts to (chat's planning takes it)."""

from __future__ import annotations

import pytest

from controlplane.common.api_error import ApiError
from inference.errors import in_terms_of
from inference.responses.planning import CHAT_TO_RESPONSES, _context, chat_body
from inference.responses.serializers import ResponsesRequestSerializer
from inference.schemas.validation import validate_body
from tests.support.generation_factories import make_principal

TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}


def planned(**body):
    body = validate_body(ResponsesRequestSerializer, {"model": "m", "input": "Hi", **body})
    context = _context(body, make_principal(), history=[])
    return context, chat_body(body, context)


def test_plain_text_request():
    context, chat = planned(
        instructions="Be brief.", max_output_tokens=5, temperature=0.5, top_p=0.9, seed=3
    )
    assert chat == {
        "model": "m",
        "temperature": 0.5,
        "top_p": 0.9,
        "seed": 3,
        "stream": False,
        "priority": 0,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
        ],
        "max_completion_tokens": 5,
    }
    assert context.store is True and context.text == {"format": {"type": "text"}}


def test_tools_and_choice_take_chat_shapes():
    context, chat = planned(
        tools=[TOOL],
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
    )
    assert chat["tools"] == [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    ]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert chat["parallel_tool_calls"] is False
    assert context.tool_choice == {"type": "function", "name": "get_weather"}


@pytest.mark.parametrize(
    ("text_format", "response_format"),
    [
        ({"type": "json_object"}, {"type": "json_object"}),
        (
            {"type": "json_schema", "name": "A", "schema": {"type": "object"}, "strict": True},
            {
                "type": "json_schema",
                "json_schema": {"name": "A", "schema": {"type": "object"}, "strict": True},
            },
        ),
    ],
)
def test_text_format_becomes_response_format(text_format, response_format):
    context, chat = planned(text={"format": text_format})
    assert chat["response_format"] == response_format
    assert context.text == {"format": text_format}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tool_choice": {"type": "function", "name": "nope"}, "tools": [TOOL]}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        # Its message holds braces: this was a 500 (KeyError) until they were escaped.
        ({"tool_choice": True}, "tool_choice"),
        ({"text": {"format": {"type": "json_schema", "name": "A"}}}, "text.format"),
        ({"input": [{"role": "user", "content": 3}]}, "input[0]"),
        ({"max_output_tokens": "5"}, "max_output_tokens"),
        ({"store": "yes"}, "store"),
    ],
)
def test_bad_fields_are_400s_naming_them(body, param):
    with pytest.raises(ApiError) as got:
        validate_body(ResponsesRequestSerializer, {"model": "m", "input": "Hi", **body})
    assert got.value.status == 400 and got.value.param == param


def test_chat_errors_are_named_in_responses_terms():
    error = in_terms_of(
        ApiError("'messages[1].content': must be a string.", param="messages[1].content"),
        CHAT_TO_RESPONSES,
    )
    assert error.param == "input" and error.message == "'input': must be a string."
    error = in_terms_of(
        ApiError("'response_format': bad.", param="response_format"), CHAT_TO_RESPONSES
    )
    assert error.param == "text.format"
