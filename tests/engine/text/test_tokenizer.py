"""ChatTokenizer's guards: long texts tokenized without the GIL, template arguments that may not
replace the renderer's own, text that is not valid Unicode, and a chat template compiled once
that still fails every request when it does not compile."""

from __future__ import annotations

import threading
import time

import pytest

from engine.text.tokenizer import TEMPLATE_RESERVED_NAMES, ChatTokenizer, TokenizerError

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def tokenizer(tiny_llama) -> ChatTokenizer:
    return ChatTokenizer(tiny_llama)


def _long_text(words: int) -> str:
    return " ".join(f"w{i}" for i in range(words))


def test_a_long_text_tokenizes_as_through_the_plain_path(tokenizer):
    text = _long_text(3000)  # past the length from which encode releases the GIL
    assert tokenizer.encode(text) == tokenizer._tok.encode(text, add_special_tokens=False).ids
    ids = tokenizer.encode(text, add_special_tokens=True)
    assert ids == tokenizer._tok.encode(text, add_special_tokens=True).ids


def test_a_long_text_leaves_other_threads_running_while_it_is_tokenized(tokenizer):
    text = _long_text(60_000)
    ticks = 0
    done = threading.Event()
    worker = threading.Thread(target=lambda: (tokenizer.encode(text), done.set()))
    worker.start()
    while not done.is_set():
        time.sleep(0.001)
        ticks += 1
    worker.join()
    # Holding the GIL for the whole encode would leave this thread a tick or two.
    assert ticks >= 10


# messages and add_generation_prompt are render_chat's own parameters: Python refuses a second.
@pytest.mark.parametrize(
    "name", sorted(TEMPLATE_RESERVED_NAMES - {"messages", "add_generation_prompt"})
)
def test_template_arguments_may_not_replace_the_renderers_own(tokenizer, name):
    with pytest.raises(TokenizerError) as info:
        tokenizer.render_chat(USER, **{name: "x"})
    assert name in str(info.value)


def test_a_lone_surrogate_is_a_tokenizer_error_not_a_type_error(tokenizer):
    for text in ("hi \ud800", "x" * 5000 + "\udfff"):
        with pytest.raises(TokenizerError, match="surrogate"):
            tokenizer.encode(text)


def test_a_template_that_does_not_compile_fails_every_request_with_the_reason(tiny_llama):
    broken = ChatTokenizer(tiny_llama)
    broken.chat_template = "{% for message in messages %}{{ message.content }}"  # no endfor
    for _ in range(2):  # the failure is not cached as a template
        with pytest.raises(TokenizerError, match="chat template failed"):
            broken.render_chat(USER)


def test_one_compiled_template_renders_each_threads_messages(tokenizer):
    expected = {n: tokenizer.render_chat([{"role": "user", "content": f"n{n}"}]) for n in range(8)}
    results: dict[int, list[str]] = {n: [] for n in expected}

    def render(n: int) -> None:
        for _ in range(50):
            results[n].append(tokenizer.render_chat([{"role": "user", "content": f"n{n}"}]))

    threads = [threading.Thread(target=render, args=(n,)) for n in expected]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(set(results[n]) == {expected[n]} for n in expected)
    assert len(set(expected.values())) == len(expected)
