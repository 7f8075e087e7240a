"""One generation from admission to settlement: what the client receives, what gets billed.

The engine here is a stand-in client (FakeEngine) that plays a script of chunks;
test_use_case_through_redis.py runs the real EngineClient against a scripted engine.
"""

from __future__ import annotations

import asyncio

import pytest

from controlplane.access.ratelimit import Limits
from inference.errors import ApiError, error_from_exception
from inference.generation.planning import prepare_chat, prepare_completion
from inference.generation.use_case import Generation
from inference.transport.engine_client import (
    EngineError,
    EngineOverloaded,
    EngineTimeout,
    EngineUnavailable,
)
from tests.support.generation_factories import (
    HANG,
    MODEL,
    billed,
    generation_for,
    make_chunk,
    make_plan,
    make_principal,
    sample_chunks,
)


class FakeEngine:
    """Stands in for EngineClient: every generate() plays ``script`` (chunks, an exception
    to raise, or HANG), or ``script(prompt_token_ids)`` when it is a function."""

    def __init__(self, script):
        self.script = script

    async def generate(self, request, _tokenizer):
        prompt_token_ids = request.message.prompt_token_ids
        steps = self.script(prompt_token_ids) if callable(self.script) else self.script
        for step in steps:
            await asyncio.sleep(0)
            if step == HANG:
                await asyncio.Event().wait()
            if isinstance(step, BaseException):
                raise step
            yield step


async def opened(plan, script) -> Generation:
    generation = await generation_for(plan)
    await generation.open(FakeEngine(script))
    return generation


# Finished generations -----------------------------------------------------------------------


async def test_stream_delivers_the_text_and_usage_and_settles_once(usage_events):
    plan = make_plan(stream=True, include_usage=True)
    generation = await opened(plan, sample_chunks(["Hel", "lo", "!"], finish_reason="length"))
    events = [event async for event in generation.events()]
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
    assert text == "Hello!"
    assert [e["choices"][0]["finish_reason"] for e in events if e["choices"]][-1] == "length"
    assert events[-1]["usage"]["completion_tokens"] == 3
    await generation.settle(500)  # a late second settlement changes nothing
    assert [billed(e) for e in await usage_events()] == [(200, 3, 3, "length")]


async def test_response_of_two_prompts_has_a_choice_each(usage_events):
    prompts = [("Once", [11, 12]), ("Twice", [21, 22, 23])]
    plan = make_plan("completion", prompts=prompts, n=2)

    def script(prompt_token_ids):
        word = " upon" if prompt_token_ids == [11, 12] else " more"
        return [make_chunk(word, index=i, finish_reason="stop") for i in range(2)]

    generation = await opened(plan, script)
    response = await generation.response()
    assert [(c["index"], c["text"]) for c in response["choices"]] == [
        (0, " upon"),
        (1, " upon"),
        (2, " more"),
        (3, " more"),
    ]
    assert response["usage"]["prompt_tokens"] == 5
    assert response["usage"]["completion_tokens"] == 4
    assert [billed(e) for e in await usage_events()] == [(200, 5, 4, "stop")]


# Refusals and failures ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("refusal", "status"),
    [
        (EngineUnavailable("no engine is serving model 'tiny'"), 503),
        (EngineOverloaded("too much waiting", retry_after=2.0), 503),
        (EngineTimeout("the engine sent nothing"), 504),
    ],
)
async def test_refusal_before_any_output_settles_with_its_status(usage_events, refusal, status):
    plan = make_plan(prompts=[("Hello there", [1, 2, 3, 4, 5, 6, 7])])
    generation = await generation_for(plan)
    with pytest.raises(type(refusal)) as info:
        await generation.open(FakeEngine([refusal]))
    assert error_from_exception(info.value).status == status
    # No engine took it: recorded with its status, billed nothing (7 prompt tokens planned).
    assert [billed(e) for e in await usage_events()] == [(status, 0, 0, "")]


@pytest.mark.parametrize("shape", ["events", "response"])
async def test_engine_failure_mid_generation_settles_with_its_status(usage_events, shape):
    plan = make_plan()
    generation = await opened(plan, [make_chunk("a"), EngineError("engine died")])
    with pytest.raises(EngineError):
        if shape == "events":
            async for _event in generation.events():
                pass
        else:
            await generation.response()
    assert [billed(e) for e in await usage_events()] == [(500, 3, 1, "")]


# The client going away ----------------------------------------------------------------------


async def test_client_closing_the_stream_mid_way_settles_499(usage_events):
    plan = make_plan(stream=True)
    generation = await opened(plan, [make_chunk("a", completion_tokens=1), HANG])
    events = generation.events()
    role, first = await anext(events), await anext(events)
    assert (role["choices"][0]["delta"]["role"], first["choices"][0]["delta"]["content"]) == (
        "assistant",
        "a",
    )
    await events.aclose()
    assert [billed(e) for e in await usage_events()] == [(499, 3, 1, "")]


async def test_stream_closed_before_its_first_chunk_settles_499(usage_events):
    generation = await opened(make_plan(stream=True), [make_chunk("a", completion_tokens=1), HANG])
    events = generation.events()
    await events.aclose()
    assert [billed(e) for e in await usage_events()] == [(499, 3, 0, "")]


async def test_a_response_closed_before_its_body_was_sent_settles_499(usage_events):
    """Django closes a streaming response's content (its sync ``close``) when the client
    leaves while the response start is being sent, without ever iterating the body."""
    generation = await opened(make_plan(stream=True), [make_chunk("a", completion_tokens=1), HANG])
    events = generation.events()
    await asyncio.to_thread(events.close)  # Django calls it through sync_to_async
    await asyncio.wait_for(generation.wait_settled(), timeout=5)
    assert [billed(e) for e in await usage_events()] == [(499, 3, 0, "")]


async def test_cancelling_a_stream_waiting_on_the_engine_settles_499(usage_events):
    plan = make_plan(stream=True)
    generation = await opened(plan, [make_chunk("a", completion_tokens=1), HANG])
    received = []

    async def consume():
        async for event in generation.events():
            received.append(event)

    task = asyncio.create_task(consume())
    while len(received) < 2:  # the role chunk, then "a"
        await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    assert [billed(e) for e in await usage_events()] == [(499, 3, 1, "")]


async def test_cancelling_a_whole_response_settles_499(usage_events):
    generation = await opened(make_plan(), [make_chunk("a", completion_tokens=1), HANG])
    task = asyncio.create_task(generation.response())
    await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert [billed(e) for e in await usage_events()] == [(499, 3, 1, "")]


async def test_cancelled_before_the_first_output_settles_499_for_the_prompt(usage_events):
    plan = make_plan()
    generation = await generation_for(plan)
    task = asyncio.create_task(generation.open(FakeEngine([HANG])))
    await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert [billed(e) for e in await usage_events()] == [(499, 3, 0, "")]


# Admission (the model comes from the database) ----------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_admitted_chat_is_planned_for_the_model_and_billed(usage_events, served):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    generation = await Generation.admit(prepare_chat, make_principal(), body)
    await generation.open(FakeEngine(sample_chunks(["Yo"])))
    response = await generation.response()
    assert response["choices"][0]["message"]["content"] == "Yo"
    num_prompt = response["usage"]["prompt_tokens"]
    assert num_prompt == generation.plan.prompt_tokens > 0
    assert [billed(e) for e in await usage_events()] == [(200, num_prompt, 1, "stop")]


@pytest.mark.django_db(transaction=True)
async def test_admission_reserves_max_tokens_for_every_choice(usage_events, served):
    principal = make_principal(limits=Limits(tokens_per_minute=10_000))
    body = {"model": MODEL, "prompt": "Once upon", "max_tokens": 5, "n": 3}
    generation = await Generation.admit(prepare_completion, principal, body)
    reserved = generation.plan.prompt_tokens + 5 * 3
    assert generation.headers["x-ratelimit-remaining-tokens"] == str(10_000 - reserved)


@pytest.mark.django_db(transaction=True)
async def test_unknown_model_is_refused_before_anything_is_reserved(usage_events, served):
    body = {"model": "nope", "messages": [{"role": "user", "content": "Hi"}]}
    with pytest.raises(ApiError) as info:
        await Generation.admit(prepare_chat, make_principal(), body)
    assert (info.value.status, info.value.code) == (404, "model_not_found")
    assert await usage_events() == []
