"""Anthropic's Messages API through the official ``anthropic`` SDK and langchain-anthropic,
against Daphne on a real socket and an engine process on the tiny random llama: structure,
stop reasons, schemas and token counts (not text quality)."""

from __future__ import annotations

import json
import uuid

import httpx
import jsonschema
import pytest

from tests.support.api_platform import IDLE_MODEL

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 12},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
    },
}
TIME = {
    "name": "get_time",
    "input_schema": {
        "type": "object",
        "properties": {"zone": {"type": "string", "maxLength": 8}},
        "required": ["zone"],
    },
}
GREEDY = {"temperature": 0.0}


def _user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def _events(platform, body: dict) -> list[tuple[str, dict]]:
    """(event name, data) of a raw streamed /v1/messages answer."""
    headers = {"x-api-key": platform.api_key, "anthropic-version": "2023-06-01"}
    with httpx.stream(
        "POST", f"{platform.base_url}/v1/messages", json=body, headers=headers, timeout=60
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        frames = response.read().decode().strip().split("\n\n")
    out = []
    for frame in frames:
        name_line, data_line = frame.split("\n")
        name, data = name_line.removeprefix("event: "), json.loads(data_line.removeprefix("data: "))
        assert data["type"] == name
        out.append((name, data))
    return out


def test_create_text_with_system_and_stop_sequences(platform):
    client = platform.anthropic_sdk()
    kwargs = dict(
        model=platform.chat_model,
        max_tokens=12,
        system=[{"type": "text", "text": "You answer briefly."}],
        messages=_user(f"Say something. {uuid.uuid4().hex}"),
        extra_body=GREEDY,
    )
    message = client.messages.create(**kwargs)
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_") and message.model == platform.chat_model
    assert message.stop_reason in ("end_turn", "max_tokens") and message.stop_sequence is None
    if message.stop_reason == "max_tokens":
        assert message.usage.output_tokens == 12
    text = "".join(block.text for block in message.content)

    # The engine sees as many prompt tokens as count_tokens says, cached or not.
    counted = client.messages.count_tokens(
        model=platform.chat_model, system=kwargs["system"], messages=kwargs["messages"]
    )
    prompt = message.usage.input_tokens + message.usage.cache_read_input_tokens
    assert counted.input_tokens == prompt > 0

    # A stop sequence from the greedy text ends the same generation early, and is named.
    assert len(text) > 4, text
    stop = text[2:4]
    stopped = client.messages.create(**kwargs, stop_sequences=[stop])
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == stop
    assert "".join(block.text for block in stopped.content) == text[: text.index(stop)]


def test_stream_sends_anthropics_event_sequence(platform):
    body = {
        "model": platform.chat_model,
        "max_tokens": 8,
        "messages": _user(f"Count. {uuid.uuid4().hex}"),
        "stream": True,
        "temperature": 0.0,
    }
    events = _events(platform, body)
    names = [name for name, _data in events]
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    blocks = names[2:-2]
    assert blocks[0] == "content_block_start" and blocks[-1] == "content_block_stop"
    assert set(blocks[1:-1]) == {"content_block_delta"}
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] in ("end_turn", "max_tokens")
    assert delta["usage"]["input_tokens"] == start["usage"]["input_tokens"]
    streamed = "".join(
        data["delta"]["text"] for name, data in events if name == "content_block_delta"
    )

    # The SDK's stream helper accumulates the same message as a whole answer.
    client = platform.anthropic_sdk()
    kwargs = dict(model=body["model"], max_tokens=8, messages=body["messages"], extra_body=GREEDY)
    with client.messages.stream(**kwargs) as stream:
        final = stream.get_final_message()
    whole = client.messages.create(**kwargs)
    assert final.content[0].text == whole.content[0].text == streamed
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens


@pytest.mark.parametrize(
    "choice",
    # One call per turn: random weights would otherwise add calls until max_tokens.
    [{"type": "any", "disable_parallel_tool_use": True}, {"type": "tool", "name": "get_weather"}],
    ids=["any", "named"],
)
def test_forced_tool_use_validates_and_round_trips(platform, choice):
    client = platform.anthropic_sdk()
    messages = _user("What is the weather in Oslo?")
    kwargs = dict(model=platform.chat_model, max_tokens=128, tools=[WEATHER, TIME])
    message = client.messages.create(**kwargs, messages=messages, tool_choice=choice)
    assert message.stop_reason == "tool_use"
    uses = [block for block in message.content if block.type == "tool_use"]
    assert uses and all(use.id.startswith("toolu_") for use in uses)
    for use in uses:
        schema = {"get_weather": WEATHER, "get_time": TIME}[use.name]["input_schema"]
        jsonschema.validate(use.input, schema)
    if choice["type"] == "tool":
        assert [use.name for use in uses] == ["get_weather"]

    # Streamed: input_json_delta pieces add up to the same kind of valid input.
    with client.messages.stream(**kwargs, messages=messages, tool_choice=choice) as stream:
        streamed = stream.get_final_message()
    (use,) = [block for block in streamed.content if block.type == "tool_use"][:1]
    jsonschema.validate(
        use.input, {"get_weather": WEATHER, "get_time": TIME}[use.name]["input_schema"]
    )

    # The client runs the tool and gives the result back; the model answers in words.
    def follow_up(result: str) -> list[dict]:
        return [
            *messages,
            {"role": "assistant", "content": [block.model_dump() for block in message.content]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": use.id, "content": result}
                    for use in uses
                ],
            },
        ]

    after = dict(kwargs, tool_choice={"type": "none"})
    answer = client.messages.create(**after, messages=follow_up("12 degrees"), extra_body=GREEDY)
    assert answer.stop_reason in ("end_turn", "max_tokens")
    assert answer.content and all(block.type == "text" for block in answer.content)
    # The result is in the prompt the engine saw.
    after.pop("max_tokens")
    counted = client.messages.count_tokens(**after, messages=follow_up("12 degrees"))
    assert counted.input_tokens == answer.usage.input_tokens + answer.usage.cache_read_input_tokens
    longer = client.messages.count_tokens(**after, messages=follow_up("12 degrees, " * 20))
    assert longer.input_tokens > counted.input_tokens


def test_errors_take_anthropics_shape(platform):
    import anthropic  # here, not at collection: 2.4 s of CPU for every test process

    client = platform.anthropic_sdk()
    with pytest.raises(anthropic.AuthenticationError) as bad_key:
        platform.anthropic_sdk(api_key="sk-not-a-key").messages.create(
            model=platform.chat_model, max_tokens=4, messages=_user("hi")
        )
    assert bad_key.value.status_code == 401
    assert bad_key.value.body["type"] == "error"
    assert bad_key.value.body["error"]["type"] == "authentication_error"

    with pytest.raises(anthropic.NotFoundError) as unknown:
        client.messages.create(model="no-such-model", max_tokens=4, messages=_user("hi"))
    assert unknown.value.body["error"]["type"] == "not_found_error"

    # The SDK insists on max_tokens too: a raw client without it.
    response = httpx.post(
        f"{platform.base_url}/v1/messages",
        json={"model": platform.chat_model, "messages": _user("hi")},
        headers={"x-api-key": platform.api_key},
    )
    assert response.status_code == 400
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in body["error"]["message"]

    with pytest.raises(anthropic.BadRequestError) as image:
        client.messages.create(
            model=platform.chat_model,
            max_tokens=4,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AA=="},
                        }
                    ],
                }
            ],
        )
    assert "image" in image.value.body["error"]["message"]

    # The OpenAI routes keep OpenAI's shape.
    openai_error = httpx.post(
        f"{platform.base_url}/v1/chat/completions",
        json={"model": "no-such-model", "messages": _user("hi")},
        headers={"Authorization": f"Bearer {platform.api_key}"},
    ).json()
    assert set(openai_error) == {"error"} and openai_error["error"]["code"] == "model_not_found"


def test_another_tenants_key_reads_nothing(platform):
    import anthropic

    limited = platform.anthropic_sdk(api_key=platform.limited_key)
    with pytest.raises(anthropic.NotFoundError):
        limited.messages.create(model=IDLE_MODEL, max_tokens=4, messages=_user("hi"))
    with pytest.raises(anthropic.NotFoundError):
        limited.messages.count_tokens(model=IDLE_MODEL, messages=_user("hi"))
    granted = limited.messages.create(model=platform.chat_model, max_tokens=2, messages=_user("hi"))
    assert granted.usage.output_tokens >= 1


def test_attribution_line_does_not_defeat_the_prefix_cache(platform):
    """Claude Code's first system line changes every turn; turn two still reads turn one's
    prompt from the prefix cache."""
    client = platform.anthropic_sdk()
    instructions = f"Session {uuid.uuid4().hex}. " + " ".join(
        f"Rule {i}: keep answers short and plain." for i in range(40)
    )

    def system(cch: str) -> list[dict]:
        header = (
            f"x-anthropic-billing-header: cc_version=2.1.119.af2; cc_entrypoint=cli; cch={cch};"
        )
        return [{"type": "text", "text": header}, {"type": "text", "text": instructions}]

    turn = _user("Hello there.")
    first = client.messages.create(
        model=platform.chat_model, max_tokens=4, system=system("97bd6"), messages=turn
    )
    turn_one_input = first.usage.input_tokens + first.usage.cache_read_input_tokens
    assert turn_one_input > 300
    second_turn = [
        *turn,
        {"role": "assistant", "content": [block.model_dump() for block in first.content] or "ok"},
        {"role": "user", "content": "And then?"},
    ]
    second = client.messages.create(
        model=platform.chat_model, max_tokens=4, system=system("24c2d"), messages=second_turn
    )
    assert second.usage.cache_read_input_tokens >= 0.9 * turn_one_input


def test_langchain_chat_anthropic_bind_tools(platform):
    from langchain_anthropic import ChatAnthropic
    from pydantic import BaseModel, Field

    class GetWeather(BaseModel):
        """Get the weather in a city."""

        city: str = Field(max_length=12)
        unit: str = Field(pattern="^(celsius|fahrenheit)$")

    chat = ChatAnthropic(
        model=platform.chat_model,
        base_url=platform.base_url,
        api_key=platform.api_key,
        max_retries=0,
        max_tokens=128,
    )
    for choice in ("GetWeather", "any"):
        message = chat.bind_tools([GetWeather], tool_choice=choice).invoke("Weather in Rome?")
        (call,) = message.tool_calls[:1]
        assert call["name"] == "GetWeather"
        GetWeather.model_validate(call["args"])


async def test_messages_over_the_websocket(platform):
    import asyncio

    import websockets

    url = platform.base_url.replace("http://", "ws://") + "/v1/ws"
    body = {"model": platform.chat_model, "max_tokens": 4, "messages": _user("Hi")}

    async def recv(ws) -> dict:
        return json.loads(await asyncio.wait_for(ws.recv(), 60))

    async with websockets.connect(url) as ws:
        await ws.send(json.dumps({"type": "auth", "api_key": platform.api_key}))
        assert (await recv(ws))["type"] == "auth.ok"
        await ws.send(json.dumps({"type": "messages", "id": "m1", "body": body}))
        events = []
        while (frame := await recv(ws))["type"] == "chunk":
            events.append(frame["data"]["type"])
        assert frame == {"type": "done", "id": "m1"}
        assert events[:2] == ["message_start", "ping"] and events[-1] == "message_stop"

        await ws.send(
            json.dumps({"type": "messages", "id": "m2", "body": {**body, "max_tokens": None}})
        )
        error = await recv(ws)
    assert error["id"] == "m2" and error["status"] == 400
    assert (
        error["error"]["type"] == "invalid_request_error"
        and "max_tokens" in error["error"]["message"]
    )


def test_anthropics_sdk_lists_and_reads_models_in_its_own_shape(platform):
    """What an Anthropic client asks first: the models, as ``ModelInfo`` pages; OpenAI's
    SDK on the same paths still gets OpenAI's objects."""
    import anthropic

    client = platform.anthropic_sdk()
    listed = list(client.models.list(limit=1))  # the SDK follows the pages to the end
    openai_ids = [model.id for model in platform.sdk().models.list()]
    assert [model.id for model in listed] == openai_ids and len(listed) >= 2
    assert all(model.type == "model" and model.lifecycle == "active" for model in listed)
    info = client.models.retrieve(platform.chat_model)
    assert info.id == platform.chat_model and info.display_name == platform.chat_model
    assert (
        info.max_input_tokens == platform.sdk().models.retrieve(platform.chat_model).max_model_len
    )
    first = client.models.list(limit=1)
    assert first.has_more and first.last_id == openai_ids[0]
    back = client.models.list(before_id=openai_ids[1], limit=5)
    assert [model.id for model in back.data] == openai_ids[:1]
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.models.retrieve("no-such-model")
    assert missing.value.body["type"] == "error"
    with pytest.raises(anthropic.AuthenticationError):
        platform.anthropic_sdk(api_key="sk-wrong").models.list()
