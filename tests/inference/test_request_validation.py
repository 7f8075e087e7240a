"""Request-body validation alone (no server): normalised values and the field errors name."""

from __future__ import annotations

import pytest

from inference.errors import ApiError
from inference.schemas.chat import ChatCompletionRequestSerializer
from inference.schemas.completions import CompletionRequestSerializer
from inference.schemas.validation import parse_json_body, validate_body

USER = [{"role": "user", "content": "hi"}]


def _error(serializer, body) -> ApiError:
    with pytest.raises(ApiError) as caught:
        validate_body(serializer, body)
    assert caught.value.status == 400
    return caught.value


def test_prompt_forms_normalise_to_a_list_of_prompts():
    text = validate_body(CompletionRequestSerializer, {"model": "m", "prompt": "text"})
    assert text["prompt"] == ["text"]
    as_ids = validate_body(CompletionRequestSerializer, {"model": "m", "prompt": [1, 2]})
    assert as_ids["prompt"] == [[1, 2]]
    many = validate_body(CompletionRequestSerializer, {"model": "m", "prompt": [[1], [2, 3]]})
    assert many["prompt"] == [[1], [2, 3]]
    texts = validate_body(CompletionRequestSerializer, {"model": "m", "prompt": ["a ", "b"]})
    assert texts["prompt"] == ["a ", "b"]  # whitespace is kept


def test_stop_accepts_string_or_list():
    one = validate_body(
        ChatCompletionRequestSerializer, {"model": "m", "messages": USER, "stop": "\n"}
    )
    assert one["stop"] == ["\n"]
    two = validate_body(
        ChatCompletionRequestSerializer, {"model": "m", "messages": USER, "stop": ["a", "b"]}
    )
    assert two["stop"] == ["a", "b"]


def test_text_content_parts_are_joined():
    body = validate_body(
        ChatCompletionRequestSerializer,
        {
            "model": "m",
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                }
            ],
        },
    )
    assert body["messages"][0]["content"] == "ab"
    error = _error(
        ChatCompletionRequestSerializer,
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
            ],
        },
    )
    assert error.param == "messages[0].content"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", True),
        ("temperature", "1"),
        ("n", 1.5),
        ("seed", "7"),
        ("stream", 1),
        ("top_logprobs", 3),
        ("logit_bias", {"1": 5}),
        ("tools", {"type": "function"}),
        ("tool_choice", "sometimes"),
    ],
)
def test_wrong_types_and_unsupported_fields(field, value):
    error = _error(ChatCompletionRequestSerializer, {"model": "m", "messages": USER, field: value})
    assert error.param == field
    assert field in error.message


def test_stream_options_need_stream():
    error = _error(
        ChatCompletionRequestSerializer,
        {"model": "m", "messages": USER, "stream_options": {"include_usage": True}},
    )
    assert error.param == "stream_options"


def test_json_body_must_be_an_object():
    with pytest.raises(ApiError):
        parse_json_body(b"[]")
    with pytest.raises(ApiError):
        parse_json_body(b"\xff")
    assert parse_json_body(b'{"a": 1}') == {"a": 1}
