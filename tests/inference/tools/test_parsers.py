"""Tool-call parsers on model text: what a user gets as content and calls, whole or streamed."""

from __future__ import annotations

import json

import pytest

from inference.tools import ToolSetup, parser_for
from inference.tools.parsers import (
    ContentDelta,
    HermesParser,
    Llama3JsonParser,
    NamedCallParser,
    RequiredCallsParser,
    collect,
)

HERMES_TWO_CALLS = (
    "Let me look that up. \n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n'
    "</tool_call>\n<tool_call>\n"
    '{"name": "get_time", "arguments": {"tz": "Europe/Paris"}}\n</tool_call>'
)


def streamed(parser, text: str, *, piece: int = 1):
    """The parser fed ``text`` in pieces of ``piece`` characters, events gathered."""
    events = []
    for start in range(0, len(text), piece):
        events += parser.feed(text[start : start + piece])
    return collect(events + parser.finish())


def test_hermes_reads_content_and_every_call():
    out = HermesParser().parse(HERMES_TWO_CALLS)
    assert out.content == "Let me look that up."
    assert [(c.name, json.loads(c.arguments)) for c in out.calls] == [
        ("get_weather", {"city": "Paris", "unit": "c"}),
        ("get_time", {"tz": "Europe/Paris"}),
    ]
    assert len({c.id for c in out.calls}) == 2 and all(c.id.startswith("call_") for c in out.calls)


@pytest.mark.parametrize("piece", [1, 3, 7, 1000])
def test_hermes_streamed_in_any_pieces_equals_whole(piece):
    whole = HermesParser().parse(HERMES_TWO_CALLS)
    parts = streamed(HermesParser(), HERMES_TWO_CALLS, piece=piece)
    assert parts.content == whole.content
    assert [(c.name, c.arguments) for c in parts.calls] == [
        (c.name, c.arguments) for c in whole.calls
    ]


def test_hermes_never_streams_part_of_a_tag_as_content():
    parser = HermesParser()
    events = parser.feed("Sure <tool_") + parser.feed("call>{")
    assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == "Sure"


def test_hermes_plain_answer_is_all_content():
    text = "The capital of France is Paris.\n"
    assert HermesParser().parse(text).content == text
    assert HermesParser().parse(text).calls == []
    assert streamed(HermesParser(), text).content == text


def test_hermes_block_that_is_not_a_call_stays_content():
    text = "<tool_call>not json</tool_call>"
    out = HermesParser().parse(text)
    assert out.calls == [] and out.content == text


def test_hermes_call_cut_before_its_closing_tag_still_counts():
    out = HermesParser().parse('<tool_call>{"name": "f", "arguments": {"x": 1}}')
    assert [(c.name, c.arguments) for c in out.calls] == [("f", '{"x": 1}')]
    truncated = HermesParser().parse('<tool_call>{"name": "f", "argu')
    assert truncated.calls == [] and truncated.content == '<tool_call>{"name": "f", "argu'


def test_without_parallel_calls_only_the_first_call_is_kept():
    out = HermesParser(max_calls=1).parse(HERMES_TWO_CALLS)
    assert [c.name for c in out.calls] == ["get_weather"]


def test_llama3_json_calls_with_python_tag_and_semicolons():
    text = '<|python_tag|>{"name": "f", "parameters": {"a": 1}}; {"name": "g", "parameters": {}}'
    out = Llama3JsonParser().parse(text)
    assert out.content is None
    assert [(c.name, json.loads(c.arguments)) for c in out.calls] == [("f", {"a": 1}), ("g", {})]
    assert [c.name for c in streamed(Llama3JsonParser(), text, piece=2).calls] == ["f", "g"]


def test_llama3_json_text_is_content_and_streams_at_once():
    parser = Llama3JsonParser()
    assert [e.text for e in parser.feed("Hello")] == ["Hello"]
    assert Llama3JsonParser().parse('{"not": "a call"}').content == '{"not": "a call"}'


def test_named_call_streams_its_arguments_as_they_come():
    parser = NamedCallParser("get_weather")
    first, second = parser.feed('{"city": '), parser.feed('"Paris"}')
    assert first[0].name == "get_weather" and first[1].text == '{"city": '
    assert [e.text for e in second] == ['"Paris"}']
    out = collect(first + second + parser.finish())
    assert out.content is None and out.calls[0].arguments == '{"city": "Paris"}'


def test_required_calls_come_out_as_each_object_closes():
    text = '[{"name": "f", "parameters": {"s": "}]{\\"["}}, {"name": "g", "parameters": {"n": [1, 2]}}]'
    parser = RequiredCallsParser()
    first = parser.feed(text[: text.index(", {")])
    assert [e.__class__.__name__ for e in first] == ["ToolCallStart", "ArgumentsDelta"]
    assert json.loads(first[1].text) == {"s": '}]{"['}
    out = collect(first + parser.feed(text[text.index(", {") :]) + parser.finish())
    assert [c.name for c in out.calls] == ["f", "g"]
    assert json.loads(out.calls[1].arguments) == {"n": [1, 2]}


def test_parser_for_follows_tool_choice():
    tools = [{"type": "function", "function": {"name": "f"}}]
    setup = lambda choice, parser="hermes": ToolSetup.from_request(  # noqa: E731
        tools=tools, tool_choice=choice, parser=parser
    )
    assert parser_for(setup("none")) is None
    assert isinstance(parser_for(setup("auto")), HermesParser)
    assert isinstance(parser_for(setup("auto", "llama3_json")), Llama3JsonParser)
    assert isinstance(parser_for(setup("required")), RequiredCallsParser)
    named = parser_for(setup({"type": "function", "function": {"name": "f"}}))
    assert isinstance(named, NamedCallParser) and named.name == "f"
