"""Prompts from request bodies: what is refused before tokenizing, template failures as 400s,
and the work done in the tokenizer threads, off the event loop."""

from __future__ import annotations

import shutil
import threading

import pytest

from engine.text.tokenizer import ChatTokenizer
from inference.errors import ApiError
from inference.generation.off_loop import off_loop
from inference.generation.planning import render_chat_prompt
from inference.generation.prompt_limits import (
    chat_text_length,
    refuse_prompts_too_long,
    refuse_text_too_long,
)

USER = [{"role": "user", "content": "hi"}]


def _context_error(call) -> ApiError:
    with pytest.raises(ApiError) as info:
        call()
    assert (info.value.status, info.value.code) == (400, "context_length_exceeded")
    return info.value


def test_token_id_prompts_as_long_as_the_context_are_refused():
    refuse_prompts_too_long([[1] * 15, "x"], max_model_len=16, param="prompt")
    error = _context_error(
        lambda: refuse_prompts_too_long([[1] * 15, [1] * 16], max_model_len=16, param="prompt")
    )
    assert error.param == "prompt" and "16 tokens" in error.message


def test_text_longer_than_the_context_could_hold_is_refused_by_its_length(settings):
    settings.PROMPT_MAX_CHARS_PER_TOKEN = 8
    refuse_text_too_long(128, max_model_len=16, param="messages")
    error = _context_error(lambda: refuse_text_too_long(129, max_model_len=16, param="messages"))
    assert error.param == "messages" and "129 characters" in error.message
    _context_error(lambda: refuse_prompts_too_long(["x" * 129], max_model_len=16, param="prompt"))


def test_the_chat_text_length_counts_contents_and_names():
    messages = [{"role": "user", "content": "abc", "name": "bob"}, {"role": "x", "content": ""}]
    assert chat_text_length(messages) == 6


@pytest.fixture
def breakable_tokenizer(tiny_llama, tmp_path) -> ChatTokenizer:
    """The tiny tokenizer with a template that adds a template argument to a string."""
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(tiny_llama, checkpoint)
    (checkpoint / "chat_template.jinja").write_text(
        "{% for m in messages %}{{ m['content'] + suffix }}{% endfor %}"
    )
    return ChatTokenizer(checkpoint)


def test_a_template_that_chokes_on_the_request_is_a_400(breakable_tokenizer):
    body = {"messages": USER, "chat_template_kwargs": {"suffix": "!"}}
    text, ids = render_chat_prompt(breakable_tokenizer, body)
    assert text == "hi!" and ids
    with pytest.raises(ApiError) as info:
        render_chat_prompt(breakable_tokenizer, {**body, "chat_template_kwargs": {"suffix": 1}})
    assert (info.value.status, info.value.param) == (400, "chat_template_kwargs")
    assert "TypeError" in info.value.message


async def test_off_loop_runs_in_a_tokenizer_thread():
    name = await off_loop(lambda: threading.current_thread().name)
    assert name.startswith("tokenize")
    assert name != threading.current_thread().name
