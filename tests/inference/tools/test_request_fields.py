"""Structured-output and tool fields of a request: what reaches the engine, and the 400s."""

from __future__ import annotations

import json

import pytest

from engine.text.tokenizer import ChatTokenizer
from inference.catalog import ModelEntry
from inference.errors import ApiError
from inference.generation.planning import SERIALIZERS, plan_chat, plan_completion
from inference.schemas.validation import validate_body
from tests.support.generation_factories import make_principal

USER = [{"role": "user", "content": "hi"}]
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
TOOL = {"type": "function", "function": {"name": "f", "parameters": SCHEMA}}


@pytest.fixture(scope="module")
def plan(tiny_llama):
    tokenizer = ChatTokenizer(tiny_llama)
    entry = ModelEntry("m", str(tiny_llama), 2048, created=0, is_embedding=False)

    def make(kind="chat", **body):
        body = {"model": "m", **({"messages": USER} if kind == "chat" else {"prompt": "x"}), **body}
        body = validate_body(SERIALIZERS[kind], body)
        plan_for = plan_chat if kind == "chat" else plan_completion
        return plan_for(make_principal(), body, entry, tokenizer)

    return make


def refused(plan, **body) -> ApiError:
    with pytest.raises(ApiError) as caught:
        plan(**body)
    assert caught.value.status == 400
    return caught.value


def constraint(plan, kind="chat", **body):
    structured = plan(kind, **body).sampling.structured
    return None if structured is None else (structured.kind, structured.spec)


def test_response_format_becomes_the_engine_constraint(plan):
    assert constraint(plan, response_format={"type": "text"}) is None
    assert constraint(plan, response_format={"type": "json_object"}) == ("json_object", "")
    kind, spec = constraint(
        plan,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "out", "schema": SCHEMA, "strict": True},
        },
    )
    assert kind == "json" and json.loads(spec) == SCHEMA


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"structured_outputs": {"json": SCHEMA}}, ("json", SCHEMA)),
        ({"structured_outputs": {"json": json.dumps(SCHEMA)}}, ("json", SCHEMA)),
        ({"structured_outputs": {"regex": "[0-9]+"}}, ("regex", "[0-9]+")),
        ({"structured_outputs": {"choice": ["yes", "no"]}}, ("choice", ["yes", "no"])),
        ({"structured_outputs": {"grammar": 'start: "a"+'}}, ("grammar", 'start: "a"+')),
        ({"structured_outputs": {"json_object": True}}, ("json_object", "")),
        ({"guided_json": SCHEMA}, ("json", SCHEMA)),
        ({"guided_regex": "[0-9]+"}, ("regex", "[0-9]+")),
        ({"guided_choice": ["yes", "no"]}, ("choice", ["yes", "no"])),
        (
            {"guided_grammar": 'start: "a"+', "guided_decoding_backend": "xgrammar"},
            ("grammar", 'start: "a"+'),
        ),
    ],
)
def test_vllm_structured_fields_old_and_new(plan, body, expected):
    for kind in ("chat", "completion"):
        got_kind, spec = constraint(plan, kind, **body)
        want_kind, want_spec = expected
        assert got_kind == want_kind
        if want_kind in ("json", "choice"):
            assert json.loads(spec) == want_spec
        else:
            assert spec == want_spec


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "objekt"}},
                }
            },
            "response_format",
            "JSON schema",
        ),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema", "required"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "bad name!"}}},
            "response_format.json_schema.name",
            "letters",
        ),
        ({"guided_regex": "(("}, "guided_regex", "regex"),
        ({"structured_outputs": {"grammar": "start: ("}}, "structured_outputs", "grammar"),
        ({"structured_outputs": {}}, "structured_outputs", "exactly one"),
        (
            {"structured_outputs": {"regex": "a", "choice": ["b"]}},
            "structured_outputs",
            "exactly one",
        ),
        ({"structured_outputs": {"structural_tag": "x"}}, "structured_outputs", "not supported"),
        ({"guided_choice": []}, "guided_choice", "empty"),
        ({"guided_json": "{not json"}, "guided_json", "JSON Schema"),
        ({"guided_regex": "a", "response_format": {"type": "json_object"}}, "guided_regex", "one"),
    ],
)
def test_bad_constraints_are_400_naming_the_field(plan, body, param, words):
    error = refused(plan, **body)
    assert error.param == param
    assert words.lower() in error.message.lower()


def test_named_tool_choice_constrains_to_the_function_schema(plan):
    made = plan(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "f"}})
    assert made.sampling.structured.kind == "json"
    assert json.loads(made.sampling.structured.spec) == {**SCHEMA, "additionalProperties": False}
    assert made.tools.mode == "named" and made.tools.named == "f"
    # A forced call wins over response_format: the output is the call.
    also = plan(tools=[TOOL], tool_choice="required", response_format={"type": "json_object"})
    assert json.loads(also.sampling.structured.spec)["type"] == "array"


def test_auto_tools_reach_the_prompt_and_force_nothing(plan):
    made = plan(tools=[TOOL])
    assert made.tools.mode == "auto" and made.sampling.structured is None
    assert '"name": "f"' in made.prompts[0][0]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tool_choice": "required"}, "tool_choice"),
        (
            {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "g"}}},
            "tool_choice",
        ),
        ({"tools": [TOOL, TOOL]}, "tools"),
        (
            {"tools": [{"type": "function", "function": {"name": "has space"}}]},
            "tools[0].function.name",
        ),
        ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
        ({"tools": [TOOL], "tool_choice": "always"}, "tool_choice"),
        ({"tools": [TOOL], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        (
            {
                "tools": [
                    {"type": "function", "function": {"name": "f", "parameters": {"type": "nope"}}}
                ],
                "tool_choice": "required",
            },
            "tools",
        ),
        ({"messages": [{"role": "tool", "content": "42"}]}, "messages[0].tool_call_id"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": "x",
                        "tool_calls": [
                            {
                                "id": "c",
                                "type": "function",
                                "function": {"name": "f", "arguments": "{}"},
                            }
                        ],
                    }
                ]
            },
            "messages[0].tool_calls",
        ),
    ],
)
def test_bad_tool_fields_are_400_naming_the_field(plan, body, param):
    assert refused(plan, **body).param == param


def test_conversation_with_calls_and_results_is_accepted(plan):
    messages = [
        *USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "f", "arguments": '{"a": 1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "2"},
    ]
    text = plan(messages=messages, tools=[TOOL]).prompts[0][0]
    assert '{"name": "f", "arguments": {"a": 1}}' in text and "<tool_response>\n2\n" in text
