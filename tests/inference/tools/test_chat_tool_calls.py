"""Tool calls in chat.completion objects and chunks, as the openai SDK reads them: every
chunk and response validates against the SDK's own types."""

from __future__ import annotations

import json

from openai.types.chat import ChatCompletion, ChatCompletionChunk

from inference.chat_store.context import ChatStoreContext
from inference.formatters import collect_response, formatter_for, stream_events
from inference.generation.plan import GenerationStats
from inference.tools import ToolSetup
from tests.support.generation_factories import (
    engine_items,
    make_plan,
    sample_chunks,
    single_prompt,
)

TOOLS = [{"type": "function", "function": {"name": "get_weather"}}]
HERMES = [
    "Checking.",
    "\n<tool_",
    'call>\n{"name": "get_weather", ',
    '"arguments": {"city": "Oslo"}}\n</tool_call>',
]


def tools_plan(choice="auto", n=1):
    return make_plan(n=n, tools=ToolSetup.from_request(tools=TOOLS, tool_choice=choice))


async def stream(plan, items) -> list[dict]:
    formatter = formatter_for(plan, GenerationStats())
    chunks = [c async for c in stream_events(formatter, engine_items(*items))]
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)
    return chunks


async def whole(plan, items) -> dict:
    response = await collect_response(formatter_for(plan, GenerationStats()), engine_items(*items))
    ChatCompletion.model_validate(response)
    return response


async def test_auto_hermes_call_streams_content_then_the_call():
    deltas = [
        c["choices"][0] for c in await stream(tools_plan(), single_prompt(sample_chunks(HERMES)))
    ]
    assert [d["delta"].get("content") for d in deltas[:2]] == ["", "Checking."]
    (call,) = [d["delta"]["tool_calls"][0] for d in deltas if "tool_calls" in d["delta"]]
    assert call["index"] == 0 and call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}
    assert deltas[-1]["finish_reason"] == "tool_calls"
    assert not any("<tool" in (d["delta"].get("content") or "") for d in deltas)


async def test_auto_hermes_call_in_a_whole_response():
    message = (await whole(tools_plan(), single_prompt(sample_chunks(HERMES))))["choices"][0]
    assert message["finish_reason"] == "tool_calls"
    assert message["message"]["content"] == "Checking."
    (call,) = message["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Oslo"}


async def test_named_call_streams_id_and_name_once_then_argument_chunks():
    plan = tools_plan({"type": "function", "function": {"name": "get_weather"}})
    pieces = ['{"city"', ': "Paris"', "}"]
    deltas = [
        c["choices"][0]["delta"] for c in await stream(plan, single_prompt(sample_chunks(pieces)))
    ]
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls[0]["id"] and calls[0]["function"]["name"] == "get_weather"
    assert all("id" not in c for c in calls[1:])
    assert "".join(c["function"]["arguments"] for c in calls) == '{"city": "Paris"}'


async def test_each_of_n_choices_gets_its_own_calls():
    plan = tools_plan("required", n=2)
    first = sample_chunks(['[{"name": "get_weather", "parameters": {"city": "A"}}]'], index=0)
    second = sample_chunks(['[{"name": "get_weather", "parameters": {"city": "B"}}]'], index=1)
    response = await whole(plan, [(0, 0, first[0]), (0, 1, second[0])])
    cities = [
        json.loads(c["message"]["tool_calls"][0]["function"]["arguments"])["city"]
        for c in response["choices"]
    ]
    assert cities == ["A", "B"]
    ids = [c["message"]["tool_calls"][0]["id"] for c in response["choices"]]
    assert len(set(ids)) == 2


async def test_answer_in_words_stays_content_and_stops():
    response = await whole(tools_plan(), single_prompt(sample_chunks(["It is ", "sunny."])))
    choice = response["choices"][0]
    assert choice["message"]["content"] == "It is sunny." and "tool_calls" not in choice["message"]
    assert choice["finish_reason"] == "stop"
    cut = sample_chunks(['{"city": "Pa'], finish_reason="length")
    named = tools_plan({"type": "function", "function": {"name": "get_weather"}})
    assert (await whole(named, single_prompt(cut)))["choices"][0]["finish_reason"] == "length"


async def test_a_stored_stream_keeps_what_the_unstreamed_request_answers():
    """``store: true`` on a stream: the completion kept is the whole response, calls parsed,
    choice by choice, as the same request unstreamed answers it (ids aside: each is new)."""
    plan = tools_plan(n=2)
    plan.chat_store = ChatStoreContext(tenant_id=1, key_prefix="sk-x", messages=[])
    first = sample_chunks(HERMES, index=0)
    second = sample_chunks(["It is ", "sunny."], index=1)
    items = [(0, 0, c) for c in first] + [(0, 1, c) for c in second]
    formatter = formatter_for(plan, GenerationStats())
    chunks = [c async for c in stream_events(formatter, engine_items(*items))]
    assert chunks and formatter.final is not None
    ChatCompletion.model_validate(formatter.final)
    answered = await whole(plan, items)

    def without_ids(response):
        for choice in response["choices"]:
            for call in choice["message"].get("tool_calls") or []:
                call.pop("id")
        return response

    assert without_ids(formatter.final) == without_ids(answered)
    assert [c["finish_reason"] for c in answered["choices"]] == ["tool_calls", "stop"]
