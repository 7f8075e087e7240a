"""Responses objects and typed stream events, validated by the openai SDK's own models."""

from __future__ import annotations

import json

import pydantic
from openai.types.responses import Response, ResponseStreamEvent

from inference.formatters import collect_response, formatter_for, stream_events
from inference.generation.plan import GenerationStats
from inference.responses.context import ResponseContext
from inference.tools import ToolSetup
from tests.support.generation_factories import (
    engine_items,
    make_plan,
    sample_chunks,
    single_prompt,
)

EVENT = pydantic.TypeAdapter(ResponseStreamEvent)


def response_plan(**fields):
    context = ResponseContext(
        tenant_id=1,
        key_prefix="sk-acme",
        input_items=[],
        instructions=fields.pop("instructions", None),
        max_output_tokens=16,
    )
    return make_plan("response", request_id=context.id, response=context, **fields)


async def stream(plan, chunks) -> list[dict]:
    formatter = formatter_for(plan, GenerationStats())
    events = [e async for e in stream_events(formatter, engine_items(*single_prompt(chunks)))]
    for event in events:
        EVENT.validate_python(event)  # every field the SDK requires, with the right types
    return events


def types(events) -> list[str]:
    return [event["type"] for event in events]


async def test_text_streams_as_one_message_with_numbered_events():
    plan = response_plan()
    events = await stream(plan, sample_chunks(["Hel", "lo", "!"], finish_reason="stop"))
    assert types(events) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    created = events[0]["response"]
    assert created["id"] == plan.request_id and created["status"] == "in_progress"
    assert created["output"] == [] and created["usage"] is None
    item_id = events[2]["item"]["id"]
    assert item_id.startswith("msg_") and events[2]["item"]["status"] == "in_progress"
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert [d["delta"] for d in deltas] == ["Hel", "lo", "!"]
    assert {(d["item_id"], d["output_index"], d["content_index"]) for d in deltas} == {
        (item_id, 0, 0)
    }
    assert events[7]["text"] == "Hello!" and events[8]["part"]["text"] == "Hello!"
    final = Response.model_validate(events[-1]["response"])
    assert final.status == "completed" and final.output_text == "Hello!"
    assert final.output[0].id == item_id and final.output[0].status == "completed"
    assert final.usage.input_tokens == 3 and final.usage.output_tokens == 3
    assert final.usage.total_tokens == 6
    assert final.usage.input_tokens_details.cached_tokens == 0
    assert final.usage.output_tokens_details.reasoning_tokens == 0


async def test_max_output_tokens_makes_it_incomplete():
    events = await stream(response_plan(), sample_chunks(["a", "b"], finish_reason="length"))
    assert events[-1]["type"] == "response.incomplete"
    final = Response.model_validate(events[-1]["response"])
    assert final.status == "incomplete"
    assert final.incomplete_details.reason == "max_output_tokens"
    assert final.output[0].status == "incomplete"


async def test_whole_response_equals_the_streamed_final_one():
    chunks = sample_chunks(["x", "y"], finish_reason="stop", cached_tokens=2)
    plan = response_plan(instructions="Be brief.")
    whole = await collect_response(
        formatter_for(plan, GenerationStats()), engine_items(*single_prompt(chunks))
    )
    streamed = (await stream(plan, chunks))[-1]["response"]
    parsed = Response.model_validate(whole)
    assert parsed.instructions == "Be brief." and parsed.output_text == "xy"
    assert parsed.usage.input_tokens_details.cached_tokens == 2

    def without_fresh_ids(response: dict) -> dict:
        output = [{k: v for k, v in item.items() if k != "id"} for item in response["output"]]
        return {**response, "output": output, "completed_at": None}

    assert without_fresh_ids(whole) == without_fresh_ids(streamed)


async def test_nothing_generated_is_still_one_empty_message():
    events = await stream(response_plan(), sample_chunks([""], finish_reason="stop"))
    final = Response.model_validate(events[-1]["response"])
    assert [item.type for item in final.output] == ["message"] and final.output_text == ""


async def test_a_forced_call_streams_as_a_function_call_item():
    setup = ToolSetup.from_request(
        tools=[{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    plan = response_plan(tools=setup)
    # A named call's grammar makes the model write the arguments object only.
    events = await stream(plan, sample_chunks(['{"city"', ': "Oslo"}'], finish_reason="stop"))
    assert "response.output_text.delta" not in types(events)
    added = next(e for e in events if e["type"] == "response.output_item.added")
    assert added["item"]["type"] == "function_call" and added["item"]["name"] == "get_weather"
    deltas = [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert "".join(deltas) == '{"city": "Oslo"}'
    final = Response.model_validate(events[-1]["response"])
    [call] = final.output
    assert call.type == "function_call" and call.arguments == '{"city": "Oslo"}'
    assert call.call_id.startswith("call_") and call.status == "completed"


async def test_an_error_event_carries_the_next_sequence_number():
    plan = response_plan()
    formatter = formatter_for(plan, GenerationStats())
    first = formatter.event("response.created", response={})
    error = formatter.error_event({"error": {"message": "boom", "code": "x", "param": None}})
    assert error == {
        "type": "error",
        "sequence_number": first["sequence_number"] + 1,
        "code": "x",
        "message": "boom",
        "param": None,
    }
    EVENT.validate_python(error)


async def test_with_auto_tools_a_call_after_whitespace_is_the_only_item():
    setup = ToolSetup.from_request(
        tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
        tool_choice="auto",
        parser="hermes",
    )
    pieces = ["\n", "<tool_call>", '{"name": "f", "arguments": {"a": 1}}', "</tool_call>", "\n"]
    events = await stream(response_plan(tools=setup), sample_chunks(pieces, finish_reason="stop"))
    final = Response.model_validate(events[-1]["response"])
    [call] = final.output
    assert call.type == "function_call" and call.name == "f"
    assert json.loads(call.arguments) == {"a": 1}


async def test_with_auto_tools_plain_words_are_a_message():
    setup = ToolSetup.from_request(
        tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
        tool_choice="auto",
        parser="hermes",
    )
    events = await stream(
        response_plan(tools=setup), sample_chunks([" It", " is", " sunny."], finish_reason="stop")
    )
    final = Response.model_validate(events[-1]["response"])
    assert [item.type for item in final.output] == ["message"]
    assert final.output_text == " It is sunny."
