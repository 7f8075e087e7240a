"""The Responses API through the official openai SDK against the served platform (Daphne, a
real engine process on the tiny llama, SQLite): create, stream, continue, store, delete, and
tenant isolation of stored responses; usage recorded like any other request."""

from __future__ import annotations

import sqlite3
import time

import openai
import pytest

from tests.support.live_platform import MODEL

pytestmark = pytest.mark.slow

# The tiny random-weight model rarely ends on its own: ignore_eos makes lengths exact, and a
# stop string taken from a first answer makes a response that completes (not "incomplete").
GREEDY = {"temperature": 0, "extra_body": {"ignore_eos": True}}


@pytest.fixture(scope="module")
def tenants(live_platform):
    db = live_platform.db
    db.manage("create_tenant", "Resp A", "--model", MODEL)
    db.manage("create_tenant", "Resp B", "--model", MODEL)
    return db.create_key("Resp A"), db.create_key("Resp B")


def _client(platform, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{platform.base_url}/v1", api_key=secret, max_retries=0)


def _rows(platform, sql: str, *args) -> list[tuple]:
    with sqlite3.connect(platform.db.path) as conn:
        return conn.execute(sql, args).fetchall()


def test_create_answers_and_stores_a_response(live_platform, tenants):
    client = _client(live_platform, tenants[0])
    response = client.responses.create(
        model=MODEL, input="Tell me about lists.", max_output_tokens=6, **GREEDY
    )
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.status == "incomplete"  # cut by max_output_tokens
    assert response.incomplete_details.reason == "max_output_tokens"
    [message] = response.output
    assert message.type == "message" and message.role == "assistant"
    assert response.output_text and response.output_text == message.content[0].text
    usage = response.usage
    assert usage.output_tokens == 6 and usage.input_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.input_tokens_details.cached_tokens >= 0
    assert usage.output_tokens_details.reasoning_tokens == 0

    again = client.responses.retrieve(response.id)
    assert again.output_text == response.output_text and again.usage == response.usage
    items = client.responses.input_items.list(response.id)
    assert [(i.type, i.role, i.content[0].text) for i in items.data] == [
        ("message", "user", "Tell me about lists.")
    ]
    [(tenant_slug,)] = _rows(
        live_platform,
        "SELECT t.slug FROM responses_storedresponse r JOIN tenants_tenant t "
        "ON t.id = r.tenant_id WHERE r.id = ?",
        response.id,
    )
    assert tenant_slug == "resp-a"


def test_instructions_become_the_system_message(live_platform, tenants):
    client = _client(live_platform, tenants[0])
    plain = client.responses.create(model=MODEL, input="Hi", max_output_tokens=1, **GREEDY)
    told = client.responses.create(
        model=MODEL, input="Hi", instructions="Answer in French.", max_output_tokens=1, **GREEDY
    )
    assert told.instructions == "Answer in French."
    assert told.usage.input_tokens > plain.usage.input_tokens


def test_stream_sends_typed_events_and_the_final_response(live_platform, tenants):
    client = _client(live_platform, tenants[0])
    full = client.responses.create(model=MODEL, input="Count.", max_output_tokens=12, **GREEDY)
    stop = full.output_text[4:7]
    assert stop and stop in full.output_text
    with client.responses.stream(
        model=MODEL,
        input="Count.",
        max_output_tokens=12,
        temperature=0,
        extra_body={"ignore_eos": True, "stop": [stop]},
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    types = [event.type for event in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = [event for event in events if event.type == "response.output_text.delta"]
    assert deltas and all(d.output_index == 0 and d.content_index == 0 for d in deltas)
    assert {d.item_id for d in deltas} == {final.output[0].id}
    expected = full.output_text[: full.output_text.index(stop)]
    assert "".join(d.delta for d in deltas) == expected == final.output_text
    assert final.status == "completed" and final.usage.output_tokens < 12
    assert client.responses.retrieve(final.id).output_text == expected


def test_a_cut_stream_ends_with_response_incomplete(live_platform, tenants):
    client = _client(live_platform, tenants[0])
    stream = client.responses.create(
        model=MODEL, input="Count.", max_output_tokens=3, stream=True, **GREEDY
    )
    events = list(stream)
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.usage.output_tokens == 3
    assert events[-1].response.output[0].status == "incomplete"


def test_previous_response_id_continues_the_conversation(live_platform, tenants):
    client = _client(live_platform, tenants[0])
    first = client.responses.create(
        model=MODEL,
        input="My name is Ada.",
        instructions="Be brief.",
        max_output_tokens=4,
        **GREEDY,
    )
    second = client.responses.create(
        model=MODEL,
        input="What is my name?",
        previous_response_id=first.id,
        max_output_tokens=4,
        **GREEDY,
    )
    assert second.previous_response_id == first.id
    # The second prompt holds the first turn: its question and the model's answer.
    alone = client.responses.create(
        model=MODEL, input="What is my name?", max_output_tokens=4, **GREEDY
    )
    assert second.usage.input_tokens > alone.usage.input_tokens + first.usage.output_tokens
    items = client.responses.input_items.list(second.id, order="asc").data
    assert [(i.type, i.role) for i in items] == [
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
    ]
    assert items[0].content[0].text == "My name is Ada."
    assert items[1].content[0].text == first.output_text
    assert items[2].content[0].text == "What is my name?"
    # Newest first by default, pages through ``after``.
    page = client.responses.input_items.list(second.id, limit=2)
    assert [i.id for i in page.data] == [items[2].id, items[1].id] and page.has_more
    rest = client.responses.input_items.list(second.id, limit=2, after=items[1].id)
    assert [i.id for i in rest.data] == [items[0].id] and not rest.has_more


def test_store_false_keeps_nothing(live_platform, tenants):
    client = _client(live_platform, tenants[0])
    response = client.responses.create(
        model=MODEL, input="Hi", store=False, max_output_tokens=2, **GREEDY
    )
    assert response.store is False and response.output_text
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(
            model=MODEL, input="again", previous_response_id=response.id, max_output_tokens=1
        )
    assert (
        _rows(live_platform, "SELECT id FROM responses_storedresponse WHERE id = ?", response.id)
        == []
    )


def test_delete_removes_a_stored_response(live_platform, tenants):
    client = _client(live_platform, tenants[0])
    response = client.responses.create(model=MODEL, input="Hi", max_output_tokens=2, **GREEDY)
    client.responses.delete(response.id)  # the SDK returns nothing: the body is checked below
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(response.id)


def test_delete_answers_the_deleted_object(live_platform, tenants):
    import httpx

    client = _client(live_platform, tenants[0])
    response = client.responses.create(model=MODEL, input="Hi", max_output_tokens=1, **GREEDY)
    answer = httpx.delete(
        f"{live_platform.base_url}/v1/responses/{response.id}",
        headers={"Authorization": f"Bearer {tenants[0]}"},
        timeout=10,
    )
    assert answer.status_code == 200
    assert answer.json() == {"id": response.id, "object": "response", "deleted": True}


def test_another_tenant_cannot_read_continue_or_delete(live_platform, tenants):
    alice, bob = (_client(live_platform, key) for key in tenants)
    response = alice.responses.create(model=MODEL, input="secret", max_output_tokens=2, **GREEDY)
    with pytest.raises(openai.NotFoundError) as got:
        bob.responses.retrieve(response.id)
    assert got.value.body["code"] == "response_not_found"
    with pytest.raises(openai.NotFoundError):
        bob.responses.input_items.list(response.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.create(
            model=MODEL, input="go on", previous_response_id=response.id, max_output_tokens=1
        )
    with pytest.raises(openai.NotFoundError):
        bob.responses.delete(response.id)
    # Still there for its owner.
    assert alice.responses.retrieve(response.id).output_text == response.output_text


def test_responses_are_recorded_in_usage(live_platform, tenants):
    client = _client(live_platform, tenants[1])
    response = client.responses.create(model=MODEL, input="Hi", max_output_tokens=3, **GREEDY)
    live_platform.db.manage("flush_usage")
    rows = _rows(
        live_platform,
        "SELECT u.prompt_tokens, u.completion_tokens, u.status FROM usage_usagerecord u "
        "JOIN tenants_tenant t ON t.id = u.tenant_id WHERE t.slug = 'resp-b'",
    )
    assert (response.usage.input_tokens, 3, 200) in rows


def test_bad_input_is_a_400_naming_the_field(live_platform, tenants):
    client = _client(live_platform, tenants[0])
    with pytest.raises(openai.BadRequestError) as got:
        client.responses.create(
            model=MODEL, input=[{"role": "user", "content": [{"type": "input_image"}]}]
        )
    assert got.value.body["param"] == "input[0]"
    with pytest.raises(openai.BadRequestError) as got:
        client.responses.create(model=MODEL, input="Hi", max_output_tokens=0)
    assert got.value.body["param"] == "max_output_tokens"
    with pytest.raises(openai.BadRequestError) as got:
        client.responses.create(model=MODEL, input="Hi", max_output_tokens=100000)
    assert got.value.body["code"] == "context_length_exceeded"
    assert got.value.body["param"] == "input"


async def _ws_response(platform, secret: str, body: dict) -> tuple[list[dict], dict]:
    import asyncio
    import json

    import websockets

    url = platform.base_url.replace("http://", "ws://") + "/v1/ws"
    async with websockets.connect(url) as ws:
        await ws.send(json.dumps({"type": "auth", "api_key": secret}))
        assert json.loads(await asyncio.wait_for(ws.recv(), 30))["type"] == "auth.ok"
        await ws.send(json.dumps({"type": "responses", "id": "r1", "body": body}))
        events = []
        while True:
            message = json.loads(await asyncio.wait_for(ws.recv(), 60))
            if message["type"] != "chunk":
                return events, message
            assert message["id"] == "r1"
            events.append(message["data"])


async def test_websocket_streams_the_same_events_and_stores(live_platform, tenants):
    body = {"model": MODEL, "input": "Count.", "max_output_tokens": 5, "temperature": 0}
    body["ignore_eos"] = True
    events, last = await _ws_response(live_platform, tenants[0], body)
    assert last == {"type": "done", "id": "r1"}
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.incomplete"
    final = events[-1]["response"]
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert final["output"][0]["content"][0]["text"] == text
    client = _client(live_platform, tenants[0])
    assert client.responses.retrieve(final["id"]).output_text == text
    # The same request over HTTP answers the same text (greedy).
    http = client.responses.create(model=MODEL, input="Count.", max_output_tokens=5, **GREEDY)
    assert http.output_text == text


def test_a_key_scoped_without_responses_is_refused(live_platform, tenants):
    db = live_platform.db
    chat_only = _client(live_platform, db.create_key("Resp A", "--scope", "chat.completions"))
    with pytest.raises(openai.PermissionDeniedError):
        chat_only.responses.create(model=MODEL, input="Hi", max_output_tokens=1)
    allowed = _client(live_platform, db.create_key("Resp A", "--scope", "responses"))
    response = allowed.responses.create(model=MODEL, input="Hi", max_output_tokens=1, **GREEDY)
    assert allowed.responses.retrieve(response.id).id == response.id


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        # An enum keeps the random-weight model's forced call short enough to finish.
        "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def test_text_format_json_schema_parses_into_the_model(live_platform, tenants):
    from pydantic import BaseModel

    class Answer(BaseModel):
        ok: bool

    client = _client(live_platform, tenants[0])
    parsed = client.responses.parse(
        model=MODEL,
        input="Is the sky blue?",
        text_format=Answer,
        max_output_tokens=64,
        temperature=0,
    )
    assert parsed.status == "completed"
    assert isinstance(parsed.output_parsed, Answer)
    assert parsed.text.format.type == "json_schema" and parsed.text.format.name == "Answer"


def test_text_format_json_object_answers_a_json_object(live_platform, tenants):
    import json

    client = _client(live_platform, tenants[0])
    response = client.responses.create(
        model=MODEL,
        input="Reply in JSON.",
        text={"format": {"type": "json_object"}},
        max_output_tokens=64,
        temperature=0,
    )
    # The random-weight model rambles inside the object until max_output_tokens; what it wrote
    # is still an object's start, which unconstrained it would practically never be.
    text = response.output_text
    if response.status == "completed":
        assert isinstance(json.loads(text), dict)
    assert text.lstrip().startswith("{"), text


def test_function_call_then_its_output_continues(live_platform, tenants):
    import json

    client = _client(live_platform, tenants[0])
    first = client.responses.create(
        model=MODEL,
        input="What is the weather in Paris?",
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,
        max_output_tokens=96,
        temperature=0,
    )
    calls = [item for item in first.output if item.type == "function_call"]
    assert first.status == "completed" and len(calls) == 1, first.output
    assert calls[0].name == "get_weather" and calls[0].call_id
    assert set(json.loads(calls[0].arguments)) == {"city"}

    def answer(result: str, **extra):
        return client.responses.create(
            model=MODEL,
            input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": result}],
            tools=[WEATHER],
            tool_choice="none",
            max_output_tokens=3,
            **extra,
            **GREEDY,
        )

    second = answer("sunny", previous_response_id=first.id)
    assert [item.type for item in second.output] == ["message"]
    # The prompt holds the first turn (question and call) and the call's result.
    alone = client.responses.create(
        model=MODEL,
        input="What is the weather in Paris?",
        tools=[WEATHER],
        tool_choice="none",
        max_output_tokens=1,
        **GREEDY,
    )
    assert second.usage.input_tokens > alone.usage.input_tokens
    longer = answer(
        "sunny, 25 degrees and a light breeze from the west", previous_response_id=first.id
    )
    assert longer.usage.input_tokens > second.usage.input_tokens
    items = client.responses.input_items.list(second.id, order="asc").data
    assert [item.type for item in items] == ["message"] + ["function_call"] * len(calls) + [
        "function_call_output"
    ]
    assert items[1].call_id == calls[0].call_id and items[-1].output == "sunny"


def test_a_named_function_call_streams_its_arguments(live_platform, tenants):
    client = _client(live_platform, tenants[0])
    with client.responses.stream(
        model=MODEL,
        input="Weather in Oslo?",
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=96,
        temperature=0,
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    [call] = final.output
    assert call.type == "function_call" and call.name == "get_weather"
    added = [e for e in events if e.type == "response.output_item.added"]
    assert [e.item.type for e in added] == ["function_call"]
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert "".join(deltas) == done.arguments == call.arguments
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_output_text_logprobs_come_when_included(live_platform, tenants):
    """include "message.output_text.logprobs" with top_logprobs: each answer token's logprob
    and alternatives, in the output_text part and, streamed, on the deltas that carry it."""
    client = _client(live_platform, tenants[0])
    asked = dict(
        model=MODEL,
        input="Count.",
        max_output_tokens=6,
        include=["message.output_text.logprobs"],
        top_logprobs=2,
        **GREEDY,
    )
    whole = client.responses.create(**asked)
    (part,) = whole.output[0].content
    assert whole.top_logprobs == 2 and len(part.logprobs) == whole.usage.output_tokens == 6
    for entry in part.logprobs:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 2
        assert entry.logprob == pytest.approx(max(t.logprob for t in entry.top_logprobs), abs=1e-4)
    with client.responses.stream(**asked) as stream:
        events = list(stream)
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    streamed = [entry for d in deltas for entry in d.logprobs]
    assert [e.token for e in streamed] == [e.token for e in part.logprobs]
    (done,) = [e for e in events if e.type == "response.output_text.done"]
    assert [e.token for e in done.logprobs] == [e.token for e in part.logprobs]
    plain = client.responses.create(
        **{k: v for k, v in asked.items() if k not in ("include", "top_logprobs")}
    )
    assert plain.output[0].content[0].logprobs == [] and plain.top_logprobs == 0
    other = client.responses.create(**{**asked, "include": ["reasoning.encrypted_content"]})
    assert other.output[0].content[0].logprobs == []  # asked for something else: ignored


def _until_finished(client, response_id: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = client.responses.retrieve(response_id)
        if found.status not in ("queued", "in_progress"):
            return found
        time.sleep(0.2)
    raise AssertionError(f"{response_id} still {found.status}")


def test_a_background_response_answers_queued_and_is_polled_to_its_end(live_platform, tenants):
    client = _client(live_platform, tenants[0])
    asked = {"model": MODEL, "input": "Count slowly.", "max_output_tokens": 6, **GREEDY}
    at_once = client.responses.create(**asked)
    queued = client.responses.create(background=True, **asked)
    assert queued.status == "queued" and queued.background and queued.output == []
    done = _until_finished(client, queued.id)
    assert done.status == "incomplete" and done.background, done.error
    assert done.output_text == at_once.output_text
    assert done.usage.output_tokens == 6
    with pytest.raises(openai.BadRequestError) as finished:
        client.responses.cancel(queued.id)
    assert "already finished" in finished.value.message
    with pytest.raises(openai.BadRequestError) as foreground:
        client.responses.cancel(at_once.id)
    assert "background" in foreground.value.message


def test_cancelling_a_background_response_stops_it(live_platform, tenants):
    client = _client(live_platform, tenants[0])
    queued = client.responses.create(
        model=MODEL, input="Go on.", background=True, max_output_tokens=1500, **GREEDY
    )
    with pytest.raises(openai.BadRequestError) as running:  # not continued before its end
        client.responses.create(
            model=MODEL, input="More.", previous_response_id=queued.id, **GREEDY
        )
    assert running.value.body["param"] == "previous_response_id"
    cancelled = client.responses.cancel(queued.id)
    assert cancelled.status == "cancelled"
    assert client.responses.cancel(queued.id).status == "cancelled"  # again: as it is
    assert client.responses.retrieve(queued.id).status == "cancelled"

    # The generation was aborted in the engine: its usage record (under the response's id)
    # is an abort (499), short of 1,500 tokens (the tiny model makes them in about 0.6 s).
    def recorded() -> list[tuple]:
        live_platform.db.manage("flush_usage")
        query = "SELECT status, completion_tokens FROM usage_usagerecord WHERE request_id = ?"
        return _rows(live_platform, query, queued.id)

    deadline = time.monotonic() + 20
    while not recorded() and time.monotonic() < deadline:
        time.sleep(0.5)
    [(status, completion_tokens)] = recorded()
    assert status == 499 and completion_tokens < 1500


def test_background_needs_store(live_platform, tenants):
    client = _client(live_platform, tenants[0])
    with pytest.raises(openai.BadRequestError) as got:
        client.responses.create(model=MODEL, input="Hi", background=True, store=False, **GREEDY)
    assert got.value.body["param"] == "background"


def _texts(events) -> tuple[list[int], str, object]:
    """The sequence numbers, the text and the last event of a stream of Responses events."""
    numbers, text, last = [], [], None
    for event in events:
        numbers.append(event.sequence_number)
        if event.type == "response.output_text.delta":
            text.append(event.delta)
        last = event
    return numbers, "".join(text), last


def test_a_streamed_background_response_resumes_after_a_dropped_connection(live_platform, tenants):
    client = _client(live_platform, tenants[0])
    asked = {"model": MODEL, "input": "Count slowly.", "max_output_tokens": 40, **GREEDY}
    at_once = client.responses.create(**asked)

    stream = client.responses.create(background=True, stream=True, **asked)
    first = [next(stream) for _ in range(6)]  # then the connection drops
    stream.close()
    assert first[0].type == "response.created" and first[0].response.background
    response_id = first[0].response.id
    head, head_text, _ = _texts(first)
    assert head == list(range(6))

    # From another connection, after the last event seen: the rest, none twice, none lost.
    rest, rest_text, last = _texts(
        client.responses.retrieve(response_id, stream=True, starting_after=head[-1])
    )
    assert rest == list(range(6, 6 + len(rest)))
    assert last.type == "response.incomplete" and last.response.usage.output_tokens == 40
    assert head_text + rest_text == at_once.output_text == last.response.output_text
    # Streamed again from the start, after its end, it is the same stream.
    again, again_text, _ = _texts(client.responses.retrieve(response_id, stream=True))
    assert again == head + rest and again_text == at_once.output_text
    assert client.responses.retrieve(response_id).output_text == at_once.output_text

    polled = client.responses.create(background=True, **{**asked, "max_output_tokens": 2})
    for not_streamable in (at_once.id, polled.id):
        with pytest.raises(openai.BadRequestError) as got:
            client.responses.retrieve(not_streamable, stream=True)
        assert got.value.body["param"] == "stream"
    with pytest.raises(openai.BadRequestError) as got:
        client.responses.retrieve(response_id, stream=True, extra_query={"starting_after": "x"})
    assert got.value.body["param"] == "starting_after"
