"""Messages objects and stream events, validated by the anthropic SDK's own models and
accumulated by its own stream helper."""

from __future__ import annotations

import functools
import json

import pydantic

from engine.protocol import SamplingOptions
from inference.formatters import collect_response, formatter_for, stream_events
from inference.generation.plan import GenerationStats
from inference.reasoning import reasoning_setup
from inference.tools import ToolSetup
from inference.transport import OutputOptions
from tests.inference.tools.test_chat_tool_calls import HERMES, TOOLS
from tests.support.generation_factories import engine_items, make_plan, sample_chunks, single_prompt

# The anthropic SDK is imported where it is used: at collection, it cost every test process
# 2.4 s of CPU.


@functools.cache
def event_model() -> pydantic.TypeAdapter:
    """The anthropic SDK's stream event union, as a validator (built once)."""
    from anthropic.types import RawMessageStreamEvent

    return pydantic.TypeAdapter(RawMessageStreamEvent)


def messages_plan(**fields):
    return make_plan(
        "messages", request_id="msg_test", sampling=SamplingOptions(max_tokens=16), **fields
    )


async def stream(plan, chunks, formatter_class=None) -> list[dict]:
    formatter = (formatter_class or type(formatter_for(plan, GenerationStats())))(
        plan, GenerationStats()
    )
    events = [e async for e in stream_events(formatter, engine_items(*single_prompt(chunks)))]
    for event in events:
        if event["type"] != "ping":  # the SDK passes pings by without a model
            event_model().validate_python(event)
    return events


def accumulated(events: list[dict]):
    """The message (the SDK's Message) the SDK's messages.stream builds from these events."""
    from anthropic.lib.streaming._messages import accumulate_event

    snapshot, json_bufs = None, {}
    for event in events:
        if event["type"] != "ping":
            snapshot = accumulate_event(
                event=event_model().validate_python(event),
                current_snapshot=snapshot,
                json_bufs=json_bufs,
            )
    return snapshot


async def whole(plan, chunks) -> dict:
    response = await collect_response(
        formatter_for(plan, GenerationStats()), engine_items(*single_prompt(chunks))
    )
    from anthropic.types import Message

    Message.model_validate(response)
    return response


async def test_text_streams_in_anthropics_event_order_and_matches_the_whole_message():
    chunks = sample_chunks(["Hel", "lo", "!"], cached_tokens=2)
    events = await stream(messages_plan(), chunks)
    assert [e["type"] for e in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0]["message"]
    # The prompt's 3 tokens: 2 read from the prefix cache, 1 not.
    assert start["usage"]["input_tokens"] == 1 and start["usage"]["cache_read_input_tokens"] == 2
    assert events[-2]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert events[-2]["usage"]["output_tokens"] == 3
    message = await whole(messages_plan(), sample_chunks(["Hel", "lo", "!"], cached_tokens=2))
    assert message["content"] == [{"type": "text", "text": "Hello!"}]
    from anthropic.types import Message

    assert accumulated(events).model_dump(exclude_none=True) == Message.model_validate(
        message
    ).model_dump(exclude_none=True)


async def test_stop_reasons():
    plan = messages_plan(output=OutputOptions(stop=("END",)))
    stopped = await whole(plan, sample_chunks(["a", "b"], stop_reason="END"))
    assert (stopped["stop_reason"], stopped["stop_sequence"]) == ("stop_sequence", "END")
    eos = await whole(plan, sample_chunks(["a"]))
    assert (eos["stop_reason"], eos["stop_sequence"]) == ("end_turn", None)
    cut = await whole(plan, sample_chunks(["a"], finish_reason="length"))
    assert cut["stop_reason"] == "max_tokens"


async def test_auto_tool_call_becomes_a_tool_use_block_after_the_text():
    plan = messages_plan(tools=ToolSetup.from_request(tools=TOOLS, tool_choice="auto"))
    events = await stream(plan, sample_chunks(HERMES))
    message = accumulated(events)
    assert [block.type for block in message.content] == ["text", "tool_use"]
    assert message.content[0].text == "Checking."
    use = message.content[1]
    assert (
        use.id.startswith("toolu_") and use.name == "get_weather" and use.input == {"city": "Oslo"}
    )
    assert message.stop_reason == "tool_use"
    assert not any("<tool" in json.dumps(e) for e in events)


async def test_named_tool_streams_input_json_deltas():
    choice = {"type": "function", "function": {"name": "get_weather"}}
    plan = messages_plan(tools=ToolSetup.from_request(tools=TOOLS, tool_choice=choice))
    events = await stream(plan, sample_chunks(['{"city"', ': "Paris"', "}"]))
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    assert {d["type"] for d in deltas} == {"input_json_delta"}
    assert "".join(d["partial_json"] for d in deltas) == '{"city": "Paris"}'
    message = accumulated(events)
    assert message.content[0].input == {"city": "Paris"} and message.stop_reason == "tool_use"
    whole_message = await whole(plan, sample_chunks(['{"city"', ': "Paris"', "}"]))
    assert whole_message["content"][0]["input"] == {"city": "Paris"}


async def test_reasoning_text_becomes_a_thinking_block_first():
    # The Qwen3 / DeepSeek-R1 parser, as a model whose template has <think> gets it.
    plan = messages_plan(reasoning=reasoning_setup("think", "<|im_start|>assistant\n"))
    events = await stream(plan, sample_chunks(["<think>", "Hmm", ".", "</think>", "Hi"]))
    kinds = [e["delta"]["type"] for e in events if e["type"] == "content_block_delta"]
    assert kinds == ["thinking_delta", "thinking_delta", "text_delta"]
    message = accumulated(events)
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "Hmm." and message.content[1].text == "Hi"
