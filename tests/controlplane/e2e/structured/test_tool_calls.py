"""Tool calls through the official openai SDK against the served stack.

``required`` and named functions are grammar-enforced, so the arguments validate against the
function's schema in every sample, on random weights too. ``auto`` parses the model's own
Hermes output: SmolLM2 does not write calls unprompted, so these tests make it write one with
a regex constraint; what they show is the server turning Hermes text into ``tool_calls``.
"""

from __future__ import annotations

import json
from collections import defaultdict

import jsonschema
import pytest

from tests.support.tools_stack import RANDOM, SMOLLM2

# SmolLM2 on a CPU: twenty constrained generations at once take a while on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 20},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
CLOCK = {
    "type": "object",
    "properties": {"timezone": {"type": "string", "maxLength": 24}},
    "required": ["timezone"],
    "additionalProperties": False,
}
SCHEMAS = {"get_weather": WEATHER, "get_time": CLOCK}
TOOLS = [
    {
        "type": "function",
        "function": {"name": name, "description": f"{name} tool", "parameters": schema},
    }
    for name, schema in SCHEMAS.items()
]
ASK = [{"role": "user", "content": "What is the weather in Paris, and the time there?"}]
# Samples per request. SmolLM2 fills up to 200 tokens a sample under the grammar (in `required`
# it often keeps adding calls), which made its two tests 145 s of an AVX2 CI run at 20; the
# grammar applies to every sample alike, so 8 of them check it as well. The random-weight
# model is cheap and keeps 20.
SAMPLES = {SMOLLM2: 8, RANDOM: 20}


def streamed_calls(stream) -> tuple[dict[int, list[dict]], dict[int, str]]:
    """Per choice: the tool calls put together from their deltas, and the finish reason."""
    calls: dict[int, dict[int, dict]] = defaultdict(dict)
    finish: dict[int, str] = {}
    for chunk in stream:
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                call = calls[choice.index].setdefault(
                    delta.index, {"id": None, "name": None, "arguments": ""}
                )
                if delta.id:
                    assert call["id"] is None, "a call's id comes once, in its first delta"
                    call.update(id=delta.id, name=delta.function.name)
                call["arguments"] += delta.function.arguments or ""
            if choice.finish_reason:
                finish[choice.index] = choice.finish_reason
    return {i: [c[k] for k in sorted(c)] for i, c in calls.items()}, finish


def assert_valid(name: str, arguments: str) -> None:
    jsonschema.validate(json.loads(arguments), SCHEMAS[name])


@pytest.mark.parametrize("model", [SMOLLM2, RANDOM])
def test_named_function_arguments_always_validate(stack, model):
    client = stack.sdk(timeout=600)
    kwargs = dict(
        model=model,
        messages=ASK,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        n=SAMPLES[model],
        max_tokens=200,
    )
    whole = client.chat.completions.create(**kwargs)
    assert len(whole.choices) == SAMPLES[model]
    for choice in whole.choices:
        (call,) = choice.message.tool_calls
        assert call.type == "function" and call.function.name == "get_weather"
        assert call.id.startswith("call_")
        assert_valid("get_weather", call.function.arguments)
        assert choice.finish_reason == "tool_calls" and choice.message.content is None

    calls, finish = streamed_calls(client.chat.completions.create(**kwargs, stream=True))
    assert sorted(calls) == list(range(SAMPLES[model])) and set(finish.values()) == {"tool_calls"}
    for (call,) in calls.values():
        assert call["name"] == "get_weather" and call["id"].startswith("call_")
        assert_valid("get_weather", call["arguments"])


@pytest.mark.parametrize("model", [SMOLLM2, RANDOM])
def test_required_calls_always_validate(stack, model):
    client = stack.sdk(timeout=600)
    kwargs = dict(
        model=model,
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
        n=SAMPLES[model],
        max_tokens=200,
    )
    whole = client.chat.completions.create(**kwargs)
    for choice in whole.choices:
        assert choice.message.tool_calls, choice.message
        for call in choice.message.tool_calls:
            assert_valid(call.function.name, call.function.arguments)
        # SmolLM2 sometimes keeps adding calls until max_tokens: the calls it finished are
        # returned (and valid), and the finish reason says the turn was cut.
        assert choice.finish_reason in ("tool_calls", "length")

    calls, _finish = streamed_calls(client.chat.completions.create(**kwargs, stream=True))
    assert sorted(calls) == list(range(SAMPLES[model]))
    for choice_calls in calls.values():
        assert choice_calls and len({c["id"] for c in choice_calls}) == len(choice_calls)
        for call in choice_calls:
            assert_valid(call["name"], call["arguments"])


def test_without_parallel_tool_calls_each_choice_makes_one_call(stack):
    reply = stack.sdk(timeout=600).chat.completions.create(
        model=RANDOM,
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
        n=8,
        max_tokens=200,
    )
    for choice in reply.choices:
        (call,) = choice.message.tool_calls
        assert_valid(call.function.name, call.function.arguments)


# What the model is made to write: a Hermes call after a few words (SmolLM2 picks the words).
HERMES_OUTPUT = (
    r'[A-Za-z ]{1,20}\.\n<tool_call>\n\{"name": "get_weather", "arguments": '
    r'\{"city": "(Paris|Lyon)", "unit": "celsius"\}\}\n</tool_call>'
)


def test_auto_reads_hermes_calls_from_the_output(stack):
    client = stack.sdk(timeout=600)
    kwargs = dict(
        model=SMOLLM2,
        messages=ASK,
        tools=TOOLS,
        max_tokens=120,
        extra_body={"structured_outputs": {"regex": HERMES_OUTPUT}},
    )
    whole = client.chat.completions.create(**kwargs)
    message = whole.choices[0].message
    (call,) = message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments)["city"] in ("Paris", "Lyon")
    assert message.content and "<tool_call>" not in message.content  # the words before it
    assert whole.choices[0].finish_reason == "tool_calls"

    content, calls = "", None
    stream = client.chat.completions.create(**kwargs, stream=True)
    chunks = list(stream)
    for chunk in chunks:
        for choice in chunk.choices:
            content += choice.delta.content or ""
    calls, finish = streamed_calls(iter(chunks))
    assert "<tool_call>" not in content and content.strip()
    ((call,),) = calls.values()
    assert call["name"] == "get_weather" and finish == {0: "tool_calls"}
    assert json.loads(call["arguments"])["unit"] == "celsius"


def test_a_conversation_with_calls_and_results_goes_on(stack):
    first = stack.sdk(timeout=600).chat.completions.create(
        model=SMOLLM2,
        messages=ASK,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=100,
    )
    call = first.choices[0].message.tool_calls[0]
    history = [
        *ASK,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 18, "sky": "clear"}'},
    ]
    client = stack.sdk(timeout=600)
    reply = client.chat.completions.create(
        model=SMOLLM2, messages=history, tools=TOOLS, tool_choice="none", max_tokens=40
    )
    assert reply.choices[0].message.content and not reply.choices[0].message.tool_calls
    # The call and its result are in the prompt (tool_choice "none" shows no tool list).
    alone = client.chat.completions.create(
        model=SMOLLM2, messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=1
    )
    assert reply.usage.prompt_tokens > alone.usage.prompt_tokens + 20


def test_the_deprecated_functions_fields_are_answered_in_their_shape(stack):
    """A client on the old function-calling fields gets a validated ``function_call``, whole
    and streamed, and its next turn (the call and a ``function`` result) goes on."""
    client = stack.sdk(timeout=600)
    functions = [tool["function"] for tool in TOOLS]
    kwargs = dict(
        model=RANDOM,
        messages=ASK,
        functions=functions,
        function_call={"name": "get_weather"},
        n=4,
        max_tokens=200,
    )
    whole = client.chat.completions.create(**kwargs)
    for choice in whole.choices:
        call = choice.message.function_call
        assert call.name == "get_weather" and choice.message.tool_calls is None
        assert_valid("get_weather", call.arguments)
        assert choice.finish_reason == "function_call"

    streamed: dict[int, dict] = defaultdict(lambda: {"name": [], "arguments": ""})
    finish: dict[int, str] = {}
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        for choice in chunk.choices:
            assert choice.delta.tool_calls is None
            if choice.delta.function_call:
                call = streamed[choice.index]
                if choice.delta.function_call.name:
                    call["name"].append(choice.delta.function_call.name)
                call["arguments"] += choice.delta.function_call.arguments or ""
            if choice.finish_reason:
                finish[choice.index] = choice.finish_reason
    assert sorted(streamed) == [0, 1, 2, 3] and set(finish.values()) == {"function_call"}
    for call in streamed.values():
        assert call["name"] == ["get_weather"]  # the name once, in the first delta
        assert_valid("get_weather", call["arguments"])

    history = [
        *ASK,
        whole.choices[0].message.model_dump(exclude_none=True),
        {"role": "function", "name": "get_weather", "content": '{"temperature": 18}'},
    ]
    reply = client.chat.completions.create(
        model=RANDOM, messages=history, functions=functions, function_call="none", max_tokens=8
    )
    assert reply.choices[0].message.function_call is None
    alone = client.chat.completions.create(
        model=RANDOM, messages=ASK, functions=functions, function_call="none", max_tokens=1
    )
    assert reply.usage.prompt_tokens > alone.usage.prompt_tokens + 10  # the call and result
