"""Thinking on the way in: earlier turns' thinking sent back (under either name) is rendered
as the chat template expects, ``reasoning_effort`` and ``enable_thinking`` reach the template,
and a model gets its reasoning parser from its chat template at registration."""

from __future__ import annotations

import shutil

import pytest
from rest_framework.exceptions import ValidationError

from controlplane.deployments.checkpoints import checkpoint_inspect
from controlplane.deployments.reasoning_parsers import default_reasoning_parser
from engine.text.tokenizer import ChatTokenizer
from engine.tooling.demo.tokenizer import CHAT_TEMPLATE as CHATML
from inference.catalog import ModelEntry
from inference.errors import ApiError
from inference.generation.planning import plan_chat, render_chat_prompt
from inference.reasoning import reasoning_setup
from inference.responses.items import chat_messages, input_items, output_as_input
from inference.schemas.chat import ChatCompletionRequestSerializer
from inference.schemas.validation import validate_body
from inference.tools import ToolSetup
from tests.support.checkpoints import QWEN3_THINKING_TEMPLATE, with_thinking_template
from tests.support.generation_factories import make_principal

WEATHER = [{"type": "function", "function": {"name": "get_weather"}}]
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}


@pytest.fixture(scope="module")
def thinking_checkpoint(tiny_llama, tmp_path_factory):
    """The thinking template on the tiny llama's tokenizer (the same tokenizer as the tiny
    Qwen3's, and a checkpoint most test workers have made already)."""
    return with_thinking_template(tiny_llama, tmp_path_factory.mktemp("thinking") / "ckpt")


@pytest.fixture(scope="module")
def tokenizer(thinking_checkpoint) -> ChatTokenizer:
    return ChatTokenizer(thinking_checkpoint)


def prompt(tokenizer, **body) -> str:
    body = validate_body(ChatCompletionRequestSerializer, {"model": "m", **body})
    tools = ToolSetup.from_request(tools=body.get("tools"), tool_choice=body.get("tool_choice"))
    text, _ids = render_chat_prompt(tokenizer, body, tools)
    return text


@pytest.mark.parametrize("name", ["reasoning_content", "reasoning"])
def test_thinking_of_the_tool_loop_in_progress_goes_back_into_the_prompt(tokenizer, name):
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!", name: "An earlier turn's thinking."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL], name: "Call the tool."},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
    ]
    text = prompt(tokenizer, messages=messages, tools=WEATHER)
    # As Qwen3's template does: the current loop's thinking kept, earlier turns' dropped.
    assert "<think>\nCall the tool.\n</think>\n\n<tool_call>" in text
    assert "An earlier turn's thinking." not in text
    assert text.endswith("<|im_start|>assistant\n")


def test_only_assistant_messages_carry_reasoning(tokenizer):
    with pytest.raises(ApiError) as info:
        prompt(tokenizer, messages=[{"role": "user", "content": "x", "reasoning": "no"}])
    assert info.value.status == 400 and "reasoning" in info.value.param


def test_enable_thinking_and_reasoning_effort_switch_thinking_off(tokenizer):
    ask = [{"role": "user", "content": "Hi"}]
    thinking = prompt(tokenizer, messages=ask)
    assert thinking.endswith("<|im_start|>assistant\n")
    off = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert prompt(tokenizer, messages=ask, reasoning_effort="none").endswith(off)
    assert prompt(tokenizer, messages=ask, reasoning_effort="high") == thinking
    kwargs = {"enable_thinking": False}
    assert prompt(tokenizer, messages=ask, chat_template_kwargs=kwargs).endswith(off)
    # What the request sets in chat_template_kwargs wins over reasoning_effort.
    assert (
        prompt(
            tokenizer,
            messages=ask,
            reasoning_effort="none",
            chat_template_kwargs={"enable_thinking": True},
        )
        == thinking
    )
    # Thinking switched off by the template: the output starts as an answer.
    assert not reasoning_setup("think", prompt(tokenizer, messages=ask)).starts_in_reasoning


def test_unknown_reasoning_effort_is_a_400(tokenizer):
    with pytest.raises(ApiError) as info:
        prompt(tokenizer, messages=[{"role": "user", "content": "x"}], reasoning_effort="huge")
    assert info.value.param == "reasoning_effort"


def test_templates_that_read_reasoning_effort_get_it(thinking_checkpoint, tmp_path):
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(thinking_checkpoint, checkpoint)
    (checkpoint / "chat_template.jinja").write_text(
        "Reasoning: {{ reasoning_effort | default('medium') }}\n"
        "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    )
    tokenizer = ChatTokenizer(checkpoint)
    ask = [{"role": "user", "content": "Hi"}]
    assert prompt(tokenizer, messages=ask, reasoning_effort="low").startswith("Reasoning: low")
    assert prompt(tokenizer, messages=ask).startswith("Reasoning: medium")


def test_registration_sets_the_reasoning_parser_from_the_chat_template(thinking_checkpoint):
    assert checkpoint_inspect(path=thinking_checkpoint).reasoning_parser == "think"
    assert default_reasoning_parser(QWEN3_THINKING_TEMPLATE.read_text()) == "think"
    assert default_reasoning_parser(CHATML) == ""
    assert default_reasoning_parser(None) == ""
    harmony = "{{ '<|start|>assistant<|channel|>final<|message|>' }}"
    assert default_reasoning_parser(harmony) == "gpt_oss"


def test_responses_reasoning_items_are_the_next_assistant_turns_thinking():
    items = input_items(
        [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "Call the tool."}],
                "encrypted_content": None,
            },
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "18 C"},
        ]
    )
    assert items[1]["id"] == "rs_1"
    messages = chat_messages(items, None)
    assert messages[1]["role"] == "assistant"
    assert messages[1]["reasoning_content"] == "Call the tool."
    assert messages[1]["tool_calls"][0]["function"]["name"] == "get_weather"
    # A stored response's reasoning item continues the conversation (previous_response_id).
    output = [{**items[1], "status": "completed"}]
    assert output_as_input(output)[0]["type"] == "reasoning"


def test_a_bad_reasoning_item_is_refused():
    with pytest.raises(ValidationError):
        input_items([{"type": "reasoning", "content": [{"type": "output_text", "text": "x"}]}])


@pytest.mark.parametrize(
    ("parser", "opens", "keeps_special_tokens"),
    [("think", False, False), ("think", True, False), ("gpt_oss", False, True), ("", False, False)],
)
def test_the_plan_carries_the_models_parser(
    thinking_checkpoint, tmp_path, parser, opens, keeps_special_tokens
):
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(thinking_checkpoint, checkpoint)
    if opens:  # as QwQ and DeepSeek-R1: the generation prompt opens the thinking
        template = QWEN3_THINKING_TEMPLATE.read_text() + "{{ '<think>\\n' }}"
        (checkpoint / "chat_template.jinja").write_text(template)
    entry = ModelEntry(
        name="m",
        path=str(checkpoint),
        max_model_len=2048,
        created=0,
        is_embedding=False,
        reasoning_parser=parser,
    )
    body = validate_body(
        ChatCompletionRequestSerializer,
        {"model": "m", "messages": [{"role": "user", "content": "Hi"}]},
    )
    plan = plan_chat(make_principal(), body, entry, ChatTokenizer(checkpoint))
    if not parser:
        assert plan.reasoning is None
    else:
        assert (plan.reasoning.parser, plan.reasoning.starts_in_reasoning) == (parser, opens)
    # Harmony's channel markers are special tokens: kept in the text its parser reads.
    assert plan.output.skip_special_tokens is not keeps_special_tokens
