"""Request-body validation alone (no server): normalised values, the field errors name, and
bounds on every value (numbers, list lengths, string lengths, nesting): each out-of-range value
is a 400 naming its field, and the values at the edge of each range pass.
tests/faults/test_bad_json.py sends the same bodies to a real Daphne and engine.
"""

from __future__ import annotations

import json

import pytest

from controlplane.common.json_text import MAX_JSON_DEPTH, nested_deeper_than
from inference.errors import ApiError
from inference.schemas.chat import MAX_MESSAGES, ChatCompletionRequestSerializer
from inference.schemas.completions import CompletionRequestSerializer
from inference.schemas.embeddings import EmbeddingRequestSerializer
from inference.schemas.tokenize import DetokenizeRequestSerializer, TokenizeRequestSerializer
from inference.schemas.validation import parse_json_body, validate_body

USER = [{"role": "user", "content": "hi"}]
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1


def _chat(**fields) -> dict:
    return {"model": "m", "messages": USER, **fields}


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
        ("logit_bias", {"one": 5}),
        ("logit_bias", {"-1": 5}),
        ("logit_bias", {"1" * 5000: 5}),
        ("logit_bias", {"４２": 5}),
        ("logit_bias", {"1": "5"}),
        ("logit_bias", {"1": True}),
        ("logit_bias", {"1": 100.5}),
        ("logit_bias", [1, 5]),
        ("allowed_token_ids", []),
        ("tools", {"type": "function"}),
        ("tool_choice", "sometimes"),
    ],
)
def test_wrong_types_and_unsupported_fields(field, value):
    error = _error(ChatCompletionRequestSerializer, {"model": "m", "messages": USER, field: value})
    assert error.param == field
    assert field in error.message


def test_logit_bias_reaches_the_engine_as_token_ids_and_floats():
    body = validate_body(ChatCompletionRequestSerializer, _chat(logit_bias={"7": -100, "42": 2}))
    assert body["logit_bias"] == {7: -100.0, 42: 2.0}
    assert (
        validate_body(ChatCompletionRequestSerializer, _chat(logit_bias={}))["logit_bias"] is None
    )


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [None]}, "tools[0]"),
        ({"functions": [None]}, "functions[0]"),
        (
            {"messages": [*USER, {"role": "assistant", "content": "x", "tool_calls": [None]}]},
            "messages[1].tool_calls[0]",
        ),
    ],
)
def test_a_null_item_in_a_list_that_may_be_null_is_a_400(fields, param):
    # DRF hands a list's allow_null to its items: these were accepted, then a 500.
    assert _error(ChatCompletionRequestSerializer, _chat(**fields)).param == param
    empty = next(iter(fields))
    if empty != "messages":
        assert validate_body(ChatCompletionRequestSerializer, _chat(**{empty: None}))


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
        ({"web_search_options": {}}, "web_search_options"),
        ({"modalities": ["video"]}, "modalities"),
    ],
)
def test_output_the_models_cannot_make_is_refused_not_ignored(fields, param):
    assert _error(ChatCompletionRequestSerializer, _chat(**fields)).param.startswith(param)


def test_text_output_fields_are_accepted():
    for fields in ({"modalities": ["text"]}, {"audio": None}, {"web_search_options": None}):
        validate_body(ChatCompletionRequestSerializer, _chat(**fields))


def test_max_tokens_zero_is_a_completion_with_echo_only():
    prompt = {"model": "m", "prompt": "x", "max_tokens": 0}
    body = validate_body(CompletionRequestSerializer, {**prompt, "echo": True, "logprobs": 1})
    assert body["max_tokens"] == 0 and body["echo"] is True
    assert _error(CompletionRequestSerializer, prompt).param == "max_tokens"
    assert _error(ChatCompletionRequestSerializer, _chat(max_tokens=0)).param == "max_tokens"


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


@pytest.mark.parametrize(
    ("field", "too_far", "edge"),
    [
        ("seed", 2**63, INT64_MAX),
        ("seed", -(2**63) - 1, -(2**63)),
        ("top_k", INT32_MAX + 1, INT32_MAX),
        ("priority", INT32_MAX + 1, INT32_MAX),
        ("priority", -(2**31) - 1, -(2**31)),
        ("max_tokens", 2**63, INT64_MAX),
        ("max_completion_tokens", 2**64, INT64_MAX),
        ("min_tokens", 2**70, INT64_MAX),
        ("repetition_penalty", 1e30, 100.0),
        ("stop_token_ids", [0] * 1025, [0] * 1024),
        ("logit_bias", {str(i): -100 for i in range(301)}, {str(i): 100 for i in range(300)}),
        ("allowed_token_ids", [0] * 65537, [0] * 65536),
        ("stop", ["x"] * 17, ["x"] * 16),
        ("stop", "x" * 257, "x" * 256),
        ("model", "m" * 257, "m" * 256),
        ("user", "u" * 257, "u" * 256),
        ("cache_salt", "s" * 257, "s" * 256),
        ("messages", USER * (MAX_MESSAGES + 1), USER * MAX_MESSAGES),
    ],
)
def test_each_value_is_bounded_and_its_edge_passes(field, too_far, edge):
    error = _error(ChatCompletionRequestSerializer, _chat(**{field: too_far}))
    assert error.param == field
    assert field in error.message
    validate_body(ChatCompletionRequestSerializer, _chat(**{field: edge}))


def test_a_message_name_is_bounded():
    messages = [{"role": "user", "content": "hi", "name": "n" * 257}]
    assert _error(ChatCompletionRequestSerializer, _chat(messages=messages)).param == (
        "messages[0].name"
    )


@pytest.mark.parametrize("reserved", ["messages", "add_generation_prompt", "bos_token"])
def test_template_arguments_may_not_replace_the_servers_own(reserved):
    body = _chat(chat_template_kwargs={reserved: "x", "enable_thinking": False})
    for serializer in (ChatCompletionRequestSerializer, TokenizeRequestSerializer):
        error = _error(serializer, body)
        assert error.param == "chat_template_kwargs"
        assert reserved in error.message
    allowed = validate_body(
        ChatCompletionRequestSerializer, _chat(chat_template_kwargs={"enable_thinking": False})
    )
    assert allowed["chat_template_kwargs"] == {"enable_thinking": False}


def test_prompts_times_n_is_bounded_by_the_setting(settings):
    settings.API_MAX_SEQUENCES_PER_REQUEST = 256
    body = {"model": "m", "prompt": ["Once"] * 1000, "n": 128}
    error = _error(CompletionRequestSerializer, body)
    assert error.param == "n" and "128000" in error.message and "256" in error.message
    assert _error(CompletionRequestSerializer, {**body, "n": 1}).param == "prompt"
    validate_body(CompletionRequestSerializer, {"model": "m", "prompt": ["Once"] * 2, "n": 128})
    settings.API_MAX_SEQUENCES_PER_REQUEST = 4
    assert _error(ChatCompletionRequestSerializer, _chat(n=5)).param == "n"


def test_a_prompt_list_is_counted_before_its_items_are_looked_at():
    many = [[1]] * 3000
    error = _error(CompletionRequestSerializer, {"model": "m", "prompt": many})
    assert (error.param, "3000" in error.message) == ("prompt", True)
    # One long token-id prompt is one prompt, however many ids it has.
    one = validate_body(CompletionRequestSerializer, {"model": "m", "prompt": [1] * 3000})
    assert len(one["prompt"]) == 1
    error = _error(EmbeddingRequestSerializer, {"model": "m", "input": ["x"] * 2049})
    assert error.param == "input"


def test_detokenize_token_ids_are_bounded():
    error = _error(DetokenizeRequestSerializer, {"model": "m", "tokens": [1, 2**70]})
    assert error.param == "tokens[1]"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (_chat(messages=[{"role": "user", "content": "a\ud800"}]), "messages[0].content"),
        (
            _chat(messages=[{"role": "user", "content": [{"type": "text", "text": "\udc00"}]}]),
            "messages[0].content",
        ),
        (_chat(cache_salt="\ud800"), "cache_salt"),
        (_chat(stop=["ok", "\ud800"]), "stop"),
        (_chat(user="\ud800"), "user"),
    ],
)
def test_text_with_a_lone_surrogate_is_refused(body, param):
    # JSON can say "\ud800"; no tokenizer, hash or encoder can take what it decodes to. The
    # HTTP body's parse refuses it first (below); a batch line's body comes here.
    error = _error(ChatCompletionRequestSerializer, json.loads(json.dumps(body)))
    assert error.param == param
    assert "surrogate" in error.message


def test_a_lone_surrogate_in_a_prompt_is_refused_but_a_pair_is_text():
    error = _error(CompletionRequestSerializer, {"model": "m", "prompt": ["ok", "\ud800"]})
    assert error.param == "prompt"
    emoji = parse_json_body(b'{"model": "m", "prompt": "\\ud83d\\ude00"}')
    assert validate_body(CompletionRequestSerializer, emoji)["prompt"] == ["\U0001f600"]


# Parsing --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (rb'{"model": "m", "metadata": {"k": "\ud800"}}', "metadata.k"),
        (rb'{"input": [{"content": ["ok", "x\udfff"]}]}', "input[0].content[1]"),
        (rb'{"a": "\ude00\ud83d"}', "a"),  # a pair in the wrong order is two lone ones
        (rb'{"a": {"\ud800": 1}}', "a"),  # a key: its object is named
    ],
)
def test_a_lone_surrogate_anywhere_in_the_body_is_a_400_naming_the_field(raw, param):
    with pytest.raises(ApiError) as refused:
        parse_json_body(raw)
    assert refused.value.status == 400 and refused.value.param == param
    assert "lone UTF-16 surrogate" in refused.value.message


def test_surrogate_pairs_and_escaped_backslashes_are_text():
    body = parse_json_body(rb'{"a": "\ud83d\ude00", "b": "\\ud800", "c": "\u00e9"}')
    assert body == {"a": "\U0001f600", "b": "\\ud800", "c": "\u00e9"}


def _nested(depth: int) -> bytes:
    return b'{"a": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


def test_nesting_is_bounded_and_deep_bodies_are_a_400_not_a_recursion_error():
    assert parse_json_body(_nested(MAX_JSON_DEPTH))
    for depth in (MAX_JSON_DEPTH + 1, 100_000):
        with pytest.raises(ApiError) as caught:
            parse_json_body(_nested(depth))
        assert caught.value.status == 400
        assert "nested deeper" in caught.value.message


def test_the_depth_scan_sees_through_strings_and_escapes():
    tricky = {"a": ['[[[{{{"', "\\", '\\"]]]', "\u2028]", "é[ü"], "b": {"c": []}}
    raw = json.dumps(tricky).encode()
    assert not nested_deeper_than(raw, 3) and nested_deeper_than(raw, 2)
    raw = json.dumps(tricky, ensure_ascii=False).encode()
    assert not nested_deeper_than(raw, 3) and nested_deeper_than(raw, 2)
    assert nested_deeper_than(b'[[{"x": [{}]}]]', 4)
    assert not nested_deeper_than(b'[[{"x": [{}]}]]', 5)


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
def test_non_json_constants_are_refused(constant):
    with pytest.raises(ApiError) as caught:
        parse_json_body(b'{"temperature": ' + constant + b"}")
    assert caught.value.status == 400
    assert "not valid JSON" in caught.value.message


def test_one_serializer_serves_body_after_body_without_carrying_anything_over():
    # validate_body reuses one serializer per class and thread: each body gets its own data
    # and its own first error, whatever came before it (a list of messages included).
    bad = {"model": "m", "messages": [*USER, {"role": "user", "content": 5}], "n": 2}
    good = {"model": "m", "messages": USER, "max_tokens": 3}
    for _ in range(2):
        assert "messages[1].content" in (_error(ChatCompletionRequestSerializer, bad).param or "")
        data = validate_body(ChatCompletionRequestSerializer, good)
        assert data["max_tokens"] == 3 and len(data["messages"]) == 1
        assert "n" not in data or data["n"] == 1  # the bad body's n=2 did not stay behind


def test_threads_validate_at_once_with_their_own_serializers():
    from concurrent.futures import ThreadPoolExecutor

    def validate(max_tokens: int) -> int:
        body = {"model": "m", "prompt": "x", "max_tokens": max_tokens}
        return validate_body(CompletionRequestSerializer, body)["max_tokens"]

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(validate, range(1, 201))) == list(range(1, 201))
