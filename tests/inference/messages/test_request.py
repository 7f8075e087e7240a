"""A Messages body as the chat body it amounts to, and the refusals of what it cannot be."""

from __future__ import annotations

import pytest

from controlplane.common.api_error import ApiError
from inference.messages.attribution import without_attribution
from inference.messages.conversion import chat_body
from inference.messages.serializers import CountTokensRequestSerializer, MessagesRequestSerializer
from inference.schemas.validation import validate_body

HEADER = "x-anthropic-billing-header: cc_version=2.1.37.0d9; cc_entrypoint=cli; cch=fa690;"
TOOL = {"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}


def body(**fields):
    return {
        "model": "m",
        "max_tokens": 32,
        "messages": [{"role": "user", "content": "Hi"}],
    } | fields


def chat(raw, *, drop_attribution=True):
    return chat_body(
        validate_body(MessagesRequestSerializer, raw), drop_attribution=drop_attribution
    )


def refusal(raw, serializer=MessagesRequestSerializer) -> ApiError:
    with pytest.raises(ApiError) as caught:
        validate_body(serializer, raw)
    assert caught.value.status == 400
    return caught.value


def test_attribution_line_is_dropped_as_a_block_or_a_first_line():
    assert without_attribution([HEADER, "You are helpful."]) == ["You are helpful."]
    assert without_attribution([f"{HEADER}\nYou are helpful."]) == ["You are helpful."]
    assert without_attribution(["You are helpful.", HEADER]) == ["You are helpful.", HEADER]
    system = [{"type": "text", "text": HEADER}, {"type": "text", "text": "Be brief."}]
    assert chat(body(system=system))["messages"][0] == {"role": "system", "content": "Be brief."}
    kept = chat(body(system=system), drop_attribution=False)["messages"][0]["content"]
    assert kept.startswith(HEADER)


def test_tool_use_and_tool_result_become_calls_and_tool_messages():
    raw = body(
        system="Be brief.",
        tools=[TOOL],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        stop_sequences=["END"],
        metadata={"user_id": "u-1"},
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "s"},
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"c": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"},
                    {"type": "text", "text": "Thanks."},
                ],
            },
        ],
    )
    out = chat(raw)
    assert out["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"c": 1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny"},
        {"role": "user", "content": "Thanks."},
    ]
    assert out["tool_choice"] == "required" and out["parallel_tool_calls"] is False
    assert out["tools"][0]["function"]["parameters"] == TOOL["input_schema"]
    assert (out["max_completion_tokens"], out["stop"], out["user"]) == (32, ["END"], "u-1")


def test_named_tool_thinking_and_output_format():
    out = chat(
        body(
            tools=[TOOL],
            tool_choice={"type": "tool", "name": "get_weather"},
            thinking={"type": "disabled"},
            output_config={"effort": "low", "format": {"type": "json_schema", "schema": {}}},
        )
    )
    assert out["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert out["chat_template_kwargs"] == {"enable_thinking": False, "reasoning_effort": "low"}
    assert out["response_format"]["json_schema"]["schema"] == {}


@pytest.mark.parametrize(
    ("raw", "param", "words"),
    [
        ({"model": "m", "messages": [{"role": "user", "content": "Hi"}]}, "max_tokens", "required"),
        (
            body(messages=[{"role": "user", "content": [{"type": "image", "source": {}}]}]),
            "messages[0].content[0]",
            "image",
        ),
        (
            body(tools=[{"type": "web_search_20250305", "name": "web_search"}]),
            "tools[0]",
            "server tools",
        ),
        (body(container="c-1"), "container", "containers"),
        (body(frobnicate=True), "frobnicate", "not a field"),
        (
            body(
                messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Su"}]
            ),
            "messages",
            "prefill",
        ),
        (body(messages=[{"role": "system", "content": "Hi"}]), "messages[0].role", "system"),
        (
            body(thinking={"type": "enabled", "budget_tokens": 2048}),
            "thinking",
            "less than max_tokens",
        ),
        (body(tool_choice={"type": "tool", "name": "nope"}, tools=[TOOL]), "tool_choice", "nope"),
        (body(temperature=1.5), "temperature", "1"),
        # A block's type as a list or object is an error, not a server error.
        (body(system=[{"type": [], "text": "x"}]), "system", "only text blocks"),
        (
            body(
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": "t", "content": [{"type": {}}]}
                        ],
                    }
                ]
            ),
            "messages[0].content[0]",
            "only text blocks",
        ),
    ],
    ids=[
        "max_tokens",
        "image",
        "server-tool",
        "container",
        "unknown",
        "prefill",
        "system-role",
        "budget",
        "tool-name",
        "temperature",
        "system-block-type",
        "tool-result-block-type",
    ],
)
def test_refusals_name_the_field(raw, param, words):
    error = refusal(raw)
    assert error.param == param and words in error.message


def test_count_tokens_needs_no_max_tokens_and_takes_no_sampling():
    raw = body()
    raw.pop("max_tokens")
    assert validate_body(CountTokensRequestSerializer, raw)["model"] == "m"
    assert refusal({**raw, "temperature": 0.5}, CountTokensRequestSerializer).param == "temperature"


def test_fields_about_anthropics_service_are_accepted():
    out = chat(body(service_tier="auto", cache_control={"type": "ephemeral"}, inference_geo="eu"))
    assert out["messages"] == [{"role": "user", "content": "Hi"}]
