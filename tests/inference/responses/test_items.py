"""Input items: validated with ids, turned into chat messages, and output fed back as input."""

from __future__ import annotations

import pytest
from rest_framework import serializers

from inference.responses.items import chat_messages, input_items, output_as_input


def test_a_string_is_one_user_message():
    [item] = input_items("Hi there")
    assert item["id"].startswith("msg_")
    assert {k: v for k, v in item.items() if k != "id"} == {
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": [{"type": "input_text", "text": "Hi there"}],
    }


def test_messages_with_and_without_type_and_text_parts():
    items = input_items(
        [
            {"role": "developer", "content": "Be brief."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]},
            {"role": "assistant", "content": "b", "id": "msg_given"},
        ]
    )
    assert [(i["role"], i["content"][0]["type"]) for i in items] == [
        ("developer", "input_text"),
        ("user", "input_text"),
        ("assistant", "output_text"),
    ]
    assert items[2]["id"] == "msg_given"
    assert chat_messages(items, "Answer in French.") == [
        {"role": "system", "content": "Answer in French."},
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
    ]


def test_function_calls_become_one_assistant_turn_and_outputs_tool_messages():
    items = input_items(
        [
            {"role": "user", "content": "Weather in Oslo and Paris?"},
            {"type": "function_call", "call_id": "c1", "name": "w", "arguments": '{"c":"O"}'},
            {"type": "function_call", "call_id": "c2", "name": "w", "arguments": '{"c":"P"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "cold"},
            {"type": "function_call_output", "call_id": "c2", "output": "warm"},
        ]
    )
    call = lambda i, c: {  # noqa: E731
        "id": i,
        "type": "function",
        "function": {"name": "w", "arguments": c},
    }
    assert chat_messages(items, None) == [
        {"role": "user", "content": "Weather in Oslo and Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call("c1", '{"c":"O"}'), call("c2", '{"c":"P"}')],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "cold"},
        {"role": "tool", "tool_call_id": "c2", "content": "warm"},
    ]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "non-empty list"),
        (3, "non-empty list"),
        ([{"role": "robot", "content": "x"}], "role must be one of"),
        ([{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}], "text"),
        ([{"type": "item_reference", "id": "x"}], "not supported"),
        ([{"type": "function_call", "call_id": "c", "name": "f"}], "arguments must be a string"),
        ([{"role": "user", "content": "\ud800"}], "valid Unicode"),
    ],
)
def test_bad_items_are_refused(raw, message):
    with pytest.raises(serializers.ValidationError) as got:
        input_items(raw)
    assert message in str(got.value.detail)


def test_output_continues_as_input():
    output = [
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "incomplete",
            "content": [{"type": "output_text", "text": "Hel", "annotations": [], "logprobs": []}],
        },
        {"id": "fc_1", "type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
    ]
    items = output_as_input(output)
    assert items[0]["content"] == [{"type": "output_text", "text": "Hel", "annotations": []}]
    assert items[0]["status"] == "completed" and items[1]["call_id"] == "c"
    assert chat_messages(items, None) == [
        {
            "role": "assistant",
            "content": "Hel",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        }
    ]
