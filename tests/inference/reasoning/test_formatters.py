"""Thinking in every response shape, validated by the openai SDK's own types: chat messages
and stream deltas carry it as ``reasoning_content`` and ``reasoning`` and never in
``content`` or tool arguments; Responses carry it as a reasoning item before the answer;
usage counts the reasoning tokens."""

from __future__ import annotations

import json

import pydantic
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent

from inference.formatters import collect_response, formatter_for, stream_events
from inference.generation.plan import GenerationStats
from inference.reasoning import reasoning_setup
from inference.responses.context import ResponseContext
from inference.tools import ToolSetup
from tests.inference.reasoning.transcripts import QWEN3_ANSWER, QWEN3_TOOL_CALL, odd_chunks
from tests.support.generation_factories import (
    engine_items,
    make_plan,
    sample_chunks,
    single_prompt,
)

EVENT = pydantic.TypeAdapter(ResponseStreamEvent)
THINKING = reasoning_setup("think", "<|im_start|>assistant\n")
TOOLS = ToolSetup.from_request(
    tools=[{"type": "function", "function": {"name": "get_weather"}}], tool_choice="auto"
)


def chunks_of(output: str, finish_reason: str = "stop"):
    return single_prompt(sample_chunks(odd_chunks(output), finish_reason=finish_reason))


async def chat_stream(plan, items) -> tuple[list[dict], GenerationStats]:
    stats = GenerationStats()
    chunks = [c async for c in stream_events(formatter_for(plan, stats), engine_items(*items))]
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)
    return chunks, stats


async def chat_whole(plan, items) -> dict:
    response = await collect_response(formatter_for(plan, GenerationStats()), engine_items(*items))
    ChatCompletion.model_validate(response)
    return response


def joined(deltas: list[dict], key: str) -> str:
    return "".join(d.get(key) or "" for d in deltas)


async def test_streamed_chat_keeps_thinking_out_of_content_under_both_names():
    plan = make_plan(reasoning=THINKING, include_usage=True, stream=True)
    chunks, stats = await chat_stream(plan, chunks_of(QWEN3_ANSWER.output))
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert joined(deltas, "reasoning_content") == QWEN3_ANSWER.reasoning
    assert joined(deltas, "reasoning") == QWEN3_ANSWER.reasoning
    assert all(d.get("reasoning") == d.get("reasoning_content") for d in deltas)
    assert joined(deltas, "content") == QWEN3_ANSWER.content
    # Every thinking delta comes before the first answer delta.
    first_answer = next(i for i, d in enumerate(deltas) if d.get("content"))
    assert not any(d.get("reasoning") for d in deltas[first_answer:])
    usage = chunks[-1]["usage"]
    thinking_pieces = sum(1 for d in deltas if d.get("reasoning"))
    assert usage["completion_tokens_details"]["reasoning_tokens"] >= thinking_pieces
    assert usage["completion_tokens_details"]["reasoning_tokens"] < usage["completion_tokens"]
    assert stats.reasoning_text(0) == QWEN3_ANSWER.reasoning


async def test_whole_chat_message_has_thinking_and_answer_apart():
    plan = make_plan(reasoning=THINKING)
    response = await chat_whole(plan, chunks_of(QWEN3_ANSWER.output))
    message = response["choices"][0]["message"]
    assert message["content"] == QWEN3_ANSWER.content
    assert message["reasoning_content"] == message["reasoning"] == QWEN3_ANSWER.reasoning
    assert response["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0


async def test_output_cut_while_thinking_has_no_answer():
    plan = make_plan(reasoning=THINKING)
    response = await chat_whole(plan, chunks_of("<think>\nHmm, let me", finish_reason="length"))
    choice = response["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["content"] is None
    assert choice["message"]["reasoning_content"] == "Hmm, let me"


async def test_tool_call_after_thinking_streamed_and_whole():
    plan = make_plan(reasoning=THINKING, tools=TOOLS)
    chunks, _stats = await chat_stream(plan, chunks_of(QWEN3_TOOL_CALL.output))
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    calls = [call for d in deltas for call in d.get("tool_calls") or []]
    assert [c["function"]["name"] for c in calls if "id" in c] == ["get_weather"]
    arguments = "".join(c["function"]["arguments"] for c in calls)
    assert json.loads(arguments) == {"city": "Paris", "unit": "celsius"}
    assert joined(deltas, "reasoning") == QWEN3_TOOL_CALL.reasoning
    assert joined(deltas, "content") == ""
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"

    whole = await chat_whole(plan, chunks_of(QWEN3_TOOL_CALL.output))
    message = whole["choices"][0]["message"]
    assert message["content"] is None and message["reasoning"] == QWEN3_TOOL_CALL.reasoning
    (call,) = message["tool_calls"]
    assert "think" not in call["function"]["arguments"]
    assert json.loads(call["function"]["arguments"])["city"] == "Paris"


async def test_models_without_a_reasoning_parser_answer_as_before():
    response = await chat_whole(make_plan(), chunks_of(QWEN3_ANSWER.output))
    message = response["choices"][0]["message"]
    assert message["content"] == QWEN3_ANSWER.output
    assert "reasoning_content" not in message
    assert "completion_tokens_details" not in response["usage"]


def response_plan(**fields):
    context = ResponseContext(tenant_id=1, key_prefix="sk-acme", input_items=[])
    return make_plan("response", request_id=context.id, response=context, **fields)


async def responses_events(plan, items) -> list[dict]:
    formatter = formatter_for(plan, GenerationStats())
    events = [e async for e in stream_events(formatter, engine_items(*items))]
    for event in events:
        EVENT.validate_python(event)
    return events


async def test_responses_stream_a_reasoning_item_then_the_message():
    events = await responses_events(
        response_plan(reasoning=THINKING), chunks_of(QWEN3_ANSWER.output)
    )
    kinds = [e["type"] for e in events]
    added = [e["item"]["type"] for e in events if e["type"] == "response.output_item.added"]
    assert added == ["reasoning", "message"]
    thinking = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    assert thinking == QWEN3_ANSWER.reasoning
    answer = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert answer == QWEN3_ANSWER.content
    # The reasoning item is done before the message is added.
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.output_text.delta")
    final = Response.model_validate(events[-1]["response"])
    reasoning, message = final.output
    assert reasoning.type == "reasoning" and reasoning.summary == []
    assert message.type == "message" and message.status == "completed"
    assert reasoning.content[0].type == "reasoning_text"
    assert reasoning.content[0].text == QWEN3_ANSWER.reasoning
    assert final.output_text == QWEN3_ANSWER.content
    assert final.usage.output_tokens_details.reasoning_tokens > 0


async def test_responses_function_call_after_thinking():
    plan = response_plan(reasoning=THINKING, tools=TOOLS)
    response = await collect_response(
        formatter_for(plan, GenerationStats()), engine_items(*chunks_of(QWEN3_TOOL_CALL.output))
    )
    final = Response.model_validate(response)
    assert [item.type for item in final.output] == ["reasoning", "function_call"]
    assert json.loads(final.output[1].arguments) == {"city": "Paris", "unit": "celsius"}
    assert final.output[0].content[0].text == QWEN3_TOOL_CALL.reasoning
