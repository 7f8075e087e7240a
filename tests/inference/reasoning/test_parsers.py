"""Reasoning parsers on recorded outputs of Qwen3, DeepSeek-R1 and gpt-oss: whole, and
streamed in odd-sized pieces, the split is the same and exactly the one a client needs."""

from __future__ import annotations

import json

import pytest

from inference.reasoning import PARSERS, Split, reasoning_setup
from inference.tools import ToolSetup, parser_for
from inference.tools.parsers import collect
from tests.inference.reasoning.transcripts import (
    ALL,
    GPT_OSS_TOOL_CALL,
    QWEN3_TOOL_CALL,
    Transcript,
    odd_chunks,
)


def _parser(transcript: Transcript):
    setup = reasoning_setup(transcript.parser, transcript.prompt_tail)
    assert setup is not None
    return setup.new_parser()


def _streamed(transcript: Transcript, sizes=(1, 3, 2, 5, 7, 4, 11)) -> tuple[Split, list[Split]]:
    parser = _parser(transcript)
    splits = [parser.feed(piece) for piece in odd_chunks(transcript.output, sizes)]
    splits.append(parser.finish())
    total = Split()
    for split in splits:
        total += split
    return total, splits


@pytest.mark.parametrize("transcript", ALL, ids=lambda t: t.name)
def test_whole_output_splits_into_thinking_and_answer(transcript):
    split = _parser(transcript).parse(transcript.output)
    assert split.reasoning == transcript.reasoning
    assert split.content == transcript.content


@pytest.mark.parametrize("sizes", [(1,), (2,), (3, 1, 4), (1, 3, 2, 5, 7, 4, 11), (13, 17)])
@pytest.mark.parametrize("transcript", ALL, ids=lambda t: t.name)
def test_streamed_in_odd_pieces_gives_the_same_split(transcript, sizes):
    total, splits = _streamed(transcript, sizes)
    assert total == Split(transcript.reasoning, transcript.content)
    # No piece of markup ever reaches either side, however the tags were cut.
    for split in splits:
        for marker in ("<think", "think>", "<|channel", "<|message", "<|end", "<|start"):
            assert marker not in split.content
            assert marker not in split.reasoning or transcript.name == "qwen3-cut-by-max-tokens"


@pytest.mark.parametrize("transcript", ALL, ids=lambda t: t.name)
def test_thinking_streams_before_the_answer_and_never_after(transcript):
    _total, splits = _streamed(transcript)
    answered = False
    for split in splits:
        if split.content:
            answered = True
        assert not (answered and split.reasoning and not split.content), transcript.name


def test_the_prompt_says_whether_the_output_starts_inside_the_thinking():
    assert reasoning_setup("think", "<|im_start|>assistant\n<think>\n").starts_in_reasoning
    assert not reasoning_setup("think", "<|im_start|>assistant\n").starts_in_reasoning
    assert not reasoning_setup("think", "assistant\n<think>\n\n</think>\n\n").starts_in_reasoning
    assert reasoning_setup("", "anything") is None
    assert reasoning_setup("no-such-parser", "anything") is None
    assert set(PARSERS) == {"think", "gpt_oss"}


def test_think_tag_later_in_an_answer_is_answer_text():
    parser = PARSERS["think"]()
    split = parser.parse("Use the <think> tag like this: <think>...</think>.")
    assert split == Split("", "Use the <think> tag like this: <think>...</think>.")


def test_output_without_harmony_headers_is_all_answer():
    assert PARSERS["gpt_oss"]().parse("Plain text.") == Split("", "Plain text.")


@pytest.mark.parametrize(
    ("transcript", "city"), [(QWEN3_TOOL_CALL, "Paris"), (GPT_OSS_TOOL_CALL, "Tokyo")]
)
def test_a_tool_call_after_thinking_parses_from_the_answer_alone(transcript, city):
    tools = ToolSetup.from_request(
        tools=[{"type": "function", "function": {"name": "get_weather"}}], tool_choice="auto"
    )
    _total, splits = _streamed(transcript)
    tool_parser = parser_for(tools)
    events = [event for split in splits for event in tool_parser.feed(split.content)]
    parsed = collect(events + tool_parser.finish())
    assert [call.name for call in parsed.calls] == ["get_weather"]
    assert json.loads(parsed.calls[0].arguments) == {"city": city, "unit": "celsius"}
    assert parsed.content is None
