"""A thinking model served end to end, through the openai SDK: the tiny random Qwen3 with a
Qwen3-style thinking template, registered with ``load_model`` (which picks its reasoning
parser from the template) and served by one engine on the session's platform. Random weights
write noise, so a regex constraint makes them write the shape a thinking model writes:
``<think>`` thoughts ``</think>`` then an answer or a ``<tool_call>``."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

MODEL = "tiny-qwen3-thinking"
WORDS = r"[a-z]{2,6}( [a-z]{2,6}){2,4}"
THINK = rf"<think>\n{WORDS}\n</think>\n\n"
ANSWER = {"regex": THINK + WORDS}
CALL = {
    "regex": THINK + r'<tool_call>\n\{"name": "get_weather", "arguments": '
    r'\{"city": "(Paris|Oslo)"\}\}\n</tool_call>'
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def served(platform_env, api_platform, thinking_qwen3):
    stack, _keys = platform_env
    # The engine reads the checkpoint, not the database: it starts while load_model registers.
    with ThreadPoolExecutor(max_workers=1) as pool:
        registering = pool.submit(stack.manage, "load_model", str(thinking_qwen3), "--name", MODEL)
        engine = stack.start_engine(
            thinking_qwen3, MODEL, log=stack.workdir / "engine-thinking.log", timeout=240
        )
        output = registering.result()
    assert "Reasoning parser 'think'" in output
    yield api_platform
    stack.stop_child(engine)


def _words(text: str | None) -> bool:
    return bool(text) and all(word.isalpha() for word in text.split())


def test_chat_returns_thinking_apart_from_the_answer(served):
    reply = served.sdk().chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=80, extra_body={"structured_outputs": ANSWER}
    )
    message = reply.choices[0].message
    raw = message.model_dump()
    assert _words(raw["reasoning_content"]) and raw["reasoning"] == raw["reasoning_content"]
    assert _words(message.content)
    assert "think" not in message.content and "<" not in raw["reasoning"]
    details = reply.usage.completion_tokens_details
    assert 0 < details.reasoning_tokens < reply.usage.completion_tokens


def test_streamed_chat_returns_thinking_apart_from_the_answer(served):
    stream = served.sdk().chat.completions.create(
        model=MODEL,
        messages=ASK,
        max_tokens=80,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"structured_outputs": ANSWER},
    )
    thinking, thinking_again, answer, usage = [], [], [], None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            delta = choice.delta.model_dump()
            thinking.append(delta.get("reasoning_content") or "")
            thinking_again.append(delta.get("reasoning") or "")
            answer.append(delta.get("content") or "")
    assert thinking == thinking_again
    assert _words("".join(thinking)) and _words("".join(answer))
    assert not any("<" in piece or "think" in piece for piece in answer)
    assert usage.completion_tokens_details.reasoning_tokens > 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_call_after_thinking_parses(served, stream):
    request = dict(
        model=MODEL,
        messages=ASK,
        tools=TOOLS,
        max_tokens=120,
        extra_body={"structured_outputs": CALL},
    )
    client = served.sdk()
    if not stream:
        choice = client.chat.completions.create(**request).choices[0]
        (call,) = choice.message.tool_calls
        name, arguments = call.function.name, call.function.arguments
        thinking = choice.message.model_dump()["reasoning_content"]
        content, reason = choice.message.content, choice.finish_reason
    else:
        name, arguments, thinking, content, reason = "", "", "", "", None
        for chunk in client.chat.completions.create(**request, stream=True):
            delta = chunk.choices[0].delta
            thinking += delta.model_dump().get("reasoning") or ""
            content += delta.content or ""
            for call in delta.tool_calls or []:
                name += call.function.name or ""
                arguments += call.function.arguments or ""
            reason = chunk.choices[0].finish_reason or reason
    assert name == "get_weather" and reason == "tool_calls"
    assert json.loads(arguments)["city"] in ("Paris", "Oslo")
    assert _words(thinking) and not content


def test_responses_api_returns_a_reasoning_item_then_the_message(served):
    request = dict(
        model=MODEL,
        input="What is the weather in Paris?",
        max_output_tokens=80,
        extra_body={"structured_outputs": ANSWER},
    )
    client = served.sdk()
    with client.responses.stream(**request) as stream:
        events = list(stream)
        final = stream.get_final_response()
    thinking = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    answer = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    reasoning, message = final.output
    assert reasoning.type == "reasoning" and message.type == "message"
    assert _words(thinking) and reasoning.content[0].text == thinking
    assert _words(answer) and final.output_text == answer
    assert final.usage.output_tokens_details.reasoning_tokens > 0
    whole = client.responses.create(**request)
    assert [item.type for item in whole.output] == ["reasoning", "message"]
    assert _words(whole.output[0].content[0].text) and _words(whole.output_text)
