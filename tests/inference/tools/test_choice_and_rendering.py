"""Forced tool calls as constraints, and tools in the chat template (native and fallback)."""

from __future__ import annotations

import json
import shutil

import jsonschema
import pytest

from engine.structured.spec import validate
from engine.text.tokenizer import ChatTokenizer
from inference.tools import ToolSetup, parser_for, structured_for, template_input
from inference.tools.choice import closed

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
            "required": ["city"],
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}  # no parameters at all


def setup(choice="auto", *, parallel=None, tools=(WEATHER, TIME), parser="hermes"):
    return ToolSetup.from_request(
        tools=list(tools), tool_choice=choice, parallel_tool_calls=parallel, parser=parser
    )


def test_named_function_is_constrained_to_its_parameters():
    structured = structured_for(setup({"type": "function", "function": {"name": "get_weather"}}))
    assert structured.kind == "json"
    # The schema as given, closed to properties it does not list.
    assert json.loads(structured.spec) == {
        **WEATHER["function"]["parameters"],
        "additionalProperties": False,
    }
    validate(structured)  # compiles in the engine's grammar compiler


def test_objects_that_leave_extra_properties_open_are_closed():
    schema = {
        "type": "object",
        "properties": {
            "inner": {"type": "object", "properties": {"a": {"type": "integer"}}},
            "free": {"type": "object", "additionalProperties": {"type": "string"}},
            "list": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
        },
        "$defs": {"Item": {"anyOf": [{"type": "object", "properties": {"b": {}}}]}},
    }
    out = closed(schema)
    assert out["additionalProperties"] is False
    assert out["properties"]["inner"]["additionalProperties"] is False
    assert out["properties"]["free"]["additionalProperties"] == {"type": "string"}  # as said
    assert out["$defs"]["Item"]["anyOf"][0]["additionalProperties"] is False
    assert "additionalProperties" not in schema  # the request's own schema is left alone
    good = {"inner": {"a": 1}, "free": {"x": "y"}, "list": [{"b": 2}]}
    jsonschema.validate(good, out)
    jsonschema.validate(good, schema)


def test_required_schema_accepts_calls_of_listed_tools_only():
    structured = structured_for(setup("required"))
    validate(structured)
    schema = json.loads(structured.spec)
    good = [
        {"name": "get_weather", "parameters": {"city": "Oslo"}},
        {"name": "get_time", "parameters": {}},
    ]
    jsonschema.validate(good, schema)
    for bad in (
        [],
        [{"name": "rm_rf", "parameters": {}}],
        [{"name": "get_weather", "parameters": {}}],
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    calls = parser_for(setup("required")).parse(json.dumps(good)).calls
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Oslo"}),
        ("get_time", {}),
    ]


def test_required_without_parallel_calls_allows_one_call():
    schema = json.loads(structured_for(setup("required", parallel=False)).spec)
    assert schema["maxItems"] == 1


def test_auto_and_none_force_nothing():
    assert structured_for(setup("auto")) is None
    assert structured_for(setup("none")) is None
    assert structured_for(None) is None


HISTORY = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "content": "18 C, sunny", "tool_call_id": "call_1"},
]


def test_template_without_tools_gets_them_in_a_system_message(tiny_llama):
    tokenizer = ChatTokenizer(tiny_llama)  # the demo ChatML template never mentions tools
    messages, kwargs = template_input(HISTORY, setup(), tokenizer.chat_template)
    assert kwargs == {}
    text = tokenizer.render_chat(messages)
    assert text.startswith("<|im_start|>system\n# Tools")
    assert '"name": "get_weather"' in text and "<tool_call>" in text
    # The earlier call is written in the format the parser reads, the result as a user turn.
    assert (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    )
    assert "<|im_start|>user\n<tool_response>\n18 C, sunny\n</tool_response>" in text


def test_existing_system_message_gets_the_tools_appended(tiny_llama):
    tokenizer = ChatTokenizer(tiny_llama)
    msgs = [{"role": "system", "content": "Be brief."}, *HISTORY[:1]]
    messages, _ = template_input(msgs, setup(parser="llama3_json"), tokenizer.chat_template)
    assert messages[0]["role"] == "system" and messages[0]["content"].startswith("Be brief.\n\n")
    assert '{"name": <function name>, "parameters"' in messages[0]["content"]
    assert len(messages) == 2


def test_tool_choice_none_shows_no_tools(tiny_llama):
    tokenizer = ChatTokenizer(tiny_llama)
    messages, _ = template_input(HISTORY[:1], setup("none"), tokenizer.chat_template)
    assert messages == [{"role": "user", "content": "Weather in Paris?"}]


TOOLS_TEMPLATE = (
    "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools>{% endif %}"
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
    "{% for c in m.tool_calls or [] %}[{{ c.function.name }} {{ c.function.arguments.city }}]"
    "{% endfor %}{% if m.tool_call_id %}({{ m.tool_call_id }}){% endif %}{% endfor %}"
)


def test_template_that_knows_tools_gets_them_as_its_arguments(tiny_llama, tmp_path):
    model = shutil.copytree(tiny_llama, tmp_path / "m")
    (model / "chat_template.jinja").write_text(TOOLS_TEMPLATE)
    tokenizer = ChatTokenizer(model)
    messages, kwargs = template_input(HISTORY, setup(), tokenizer.chat_template)
    assert [t["function"]["name"] for t in kwargs["tools"]] == ["get_weather", "get_time"]
    text = tokenizer.render_chat(messages, add_generation_prompt=False, **kwargs)
    # Arguments reach the template as an object (templates write ``arguments | tojson``).
    assert text == (
        "<tools>get_weather;get_time;</tools><user>Weather in Paris?"
        "<assistant>[get_weather Paris]<tool>18 C, sunny(call_1)"
    )
